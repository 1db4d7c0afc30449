"""What a notebook's hidden test block imports: ``from transformer_course.grading import hidden_case``.

The hidden-test cases (input generators and references) are a package of their own,
``transformer_course_cases`` (lib/transformer_course_cases/); this module only gives the
notebooks their one name for it. While grading, the sandbox's copy of the package has
grader/sandboxed/grading_module.py here instead (export only, no cases, no references).
"""

from transformer_course_cases import CASES, Case, HiddenCase, case_rng, grading_seed, hidden_case

__all__ = ["CASES", "Case", "HiddenCase", "case_rng", "grading_seed", "hidden_case"]
