"""What runs INSIDE the sandbox, as the unprivileged student: nothing here is trusted.

runner.py executes the rebuilt notebook cell by cell; grading_module.py is the export-only
``transformer_course.grading`` of the sandbox's package copy. The trusted side never imports
these modules (the zygote preloads runner.py only to run it in the sandboxed process).
"""
