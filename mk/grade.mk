# The instructor's grading loop (grader/; README.md "Grading", grader/README.md).
# Included by the top-level Makefile, which defines PY and `env` and puts .venv/bin first on PATH.
#
#   make students CLASSLIST=classlist.csv   import the class list (id,first_name,last_name,email)
#   make collect LMS=download.zip ...       an LMS's download (zip or folder) -> submitted/<student>/<assignment>/
#        Canvas: CANVAS_GRADEBOOK=export.csv [LMS_TIMES=submissions.json]
#        Moodle: MOODLE_WORKSHEET=worksheet.csv ASSIGNMENT=01_attention (the worksheet is per assignment)
#        FILE_TIMES=1: the files' modification times where the LMS gives none (off: never a guess)
#   make grade                              autograde submitted/ into grades/ (table + feedback)
#   make grade-table                        rebuild the table and feedback after hand grading
#   make grade-demo                         grade the demo class of tests/fixtures/demo_class
#   make similarity                         similarity report of the solution cells (grades/similarity/)
#   make grade-export                       Canvas and Moodle grade-import CSVs (grades/lms/), per question too
#   make grade-questions                    grade written answers question by question (a page on 127.0.0.1)
#
# The term's due dates and late policy: grading.toml (GRADE_CONFIG=file for another).
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
GRADE_CONFIG ?= grading.toml
GRADER := $(GRADER_SUDO) $(abspath $(PY)) -m grader --config $(GRADE_CONFIG)

.PHONY: grade grade-demo grade-table collect students similarity grade-export grade-questions

grade: env ## autograde every submission in submitted/ into grades/ (sandboxed, progress bar)
	$(GRADER) grade --submitted $(GRADE_SUBMITTED) --grades $(GRADE_OUT) $(GRADE_ARGS)

grade-table: env ## rebuild grades/grades.csv and the feedback pages (after hand grading)
	$(GRADER) table --grades $(GRADE_OUT)

grade-demo: env ## grade the demo class (tests/fixtures/demo_class): table, late rule, similarity, LMS files, questions
	$(GRADER_SUDO) $(abspath $(PY)) -m grader demo --out $(GRADE_DEMO_OUT)

similarity: env ## similarity report of the solution cells into grades/similarity/ (changes no grade)
	$(GRADER) similarity --submitted $(GRADE_SUBMITTED) --grades $(GRADE_OUT)

grade-export: env ## Canvas gradebook CSV and Moodle grade-import CSV (also per question) into grades/lms/
	$(GRADER) export --grades $(GRADE_OUT) --per-question

grade-questions: env ## grade the written answers question by question (serves the pages on 127.0.0.1)
	$(GRADER) questions --grades $(GRADE_OUT) --serve

LMS_TIMES ?=
CANVAS_GRADEBOOK ?=
MOODLE_WORKSHEET ?=
ASSIGNMENT ?=
FILE_TIMES ?=
collect: env ## an LMS's download (LMS=zip or folder) into submitted/: CANVAS_GRADEBOOK=, MOODLE_WORKSHEET= ASSIGNMENT=, LMS_TIMES=
	$(GRADER) collect "$(LMS)" --submitted $(GRADE_SUBMITTED) --grades $(GRADE_OUT) \
		$(if $(CANVAS_GRADEBOOK),--canvas-gradebook "$(CANVAS_GRADEBOOK)") \
		$(if $(MOODLE_WORKSHEET),--moodle-worksheet "$(MOODLE_WORKSHEET)") \
		$(if $(ASSIGNMENT),--assignment $(ASSIGNMENT)) $(if $(LMS_TIMES),--times "$(LMS_TIMES)") \
		$(if $(FILE_TIMES),--file-times)

# On a hub host (`hubctl.py setup` made $(HUB_STATE)/roster.json, root only) the class lives in the hub:
# `make students` adds the hub users, their names to the instructor's gradebook and ~/grades, and needs
# neither .venv nor the network (the hub's venv runs it). Elsewhere: the class list into grades/.
.SECONDEXPANSION:
students: $$(if $$(wildcard $$(HUB_STATE)/roster.json),,env) ## import a class list (CLASSLIST=file.csv with id,first_name,last_name,email); on a hub host its hub users
	@if [ -f "$(HUB_STATE)/roster.json" ]; then \
	  $(HUB_SUDO) $(HUB_VENV)/bin/python hub/hubctl.py users --state $(HUB_STATE) --classlist $(CLASSLIST) --venv $(HUB_VENV); \
	else $(GRADER) students import $(CLASSLIST) --grades $(GRADE_OUT); fi
