"""The course's autograder: sandboxed runs, trusted scoring outside the student's process.

See grader/README.md for the instructor's loop and the threat model, and
``python -m grader --help`` for the commands.
"""

__version__ = "1.0.0"
