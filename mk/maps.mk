# The course's maps, written from its manifest course.toml by tools/maps.py (standard library only):
# README.md's course table and layout block, lib/README.md's module map, site/intro.md's opening
# and notebook list, CITATION.cff's abstract. tests/test_course_maps.py fails when one is stale.
# Included by the top-level Makefile, which defines PYTHON.

.PHONY: maps

maps: ## rewrite the course table, layout, module map, site intro and citation abstract from course.toml
	$(PYTHON) tools/maps.py
