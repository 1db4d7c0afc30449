"""The trusted side of the grader: it never runs student code in its own processes.

collect (LMS folder -> submitted/), notebooks (read sources and submissions, rebuild),
package (the sandbox's copy of the course package), compare (draw inputs, references,
trusted comparison), sandbox + zygote + seccomp (build the sandbox, supervise it, read
its exports), grading (one submission, the class), report (table, feedback, hand grades,
class list), formgrader (nbgrader's gradebook). Imports go one way, without circles: report and
formgrader both read store and neither imports the other (tests/test_grader_units.py checks it).
"""
