# The instructor's grading loop (grader/; README.md "Grading", grader/README.md).
# Included by the top-level Makefile, which defines PY and `env` and puts .venv/bin first on PATH.
#
#   make students CLASSLIST=classlist.csv   import the class list (id,first_name,last_name,email)
#   make collect LMS=downloads/             LMS download folder -> submitted/<student>/<assignment>/
#   make grade                              autograde submitted/ into grades/ (table + feedback)
#   make grade-table                        rebuild the table and feedback after hand grading
#   make grade-demo                         grade the demo class of tests/fixtures/demo_class
#
# Grading builds a sandbox per submission (namespaces, an unprivileged user): it runs as root,
# through sudo when make is not root. submitted/ and grades/ are gitignored.

GRADE_SUBMITTED ?= submitted
GRADE_OUT ?= grades
GRADE_ARGS ?=
GRADE_DEMO_OUT ?= .artifacts/grade-demo
LMS ?= downloaded
CLASSLIST ?= classlist.csv
GRADER_SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
GRADER := $(GRADER_SUDO) $(abspath $(PY)) -m grader

.PHONY: grade grade-demo grade-table collect students

grade: env ## autograde every submission in submitted/ into grades/ (sandboxed, progress bar)
	$(GRADER) grade --submitted $(GRADE_SUBMITTED) --grades $(GRADE_OUT) $(GRADE_ARGS)

grade-table: env ## rebuild grades/grades.csv and the feedback pages (after hand grading)
	$(GRADER) table --grades $(GRADE_OUT)

grade-demo: env ## grade the demo class (tests/fixtures/demo_class) and print its table
	$(GRADER) demo --out $(GRADE_DEMO_OUT)

collect: env ## copy an LMS download folder (LMS=dir) into submitted/
	$(GRADER) collect $(LMS) --submitted $(GRADE_SUBMITTED)

students: env ## import a class list (CLASSLIST=file.csv with id,first_name,last_name,email)
	$(GRADER) students import $(CLASSLIST) --grades $(GRADE_OUT)
