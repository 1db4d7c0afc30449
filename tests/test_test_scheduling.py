"""How `make test` splits the suite over its two workers (tests/conftest.py)."""

from conftest import module_shares_fixtures, scope_of


def test_modules_with_a_shared_fixture_run_whole_on_one_worker():
    # a grading run, a demo class on a fixed port, a hub, a site server: built once per module
    for path in ("tests/test_grader_correct.py", "tests/test_grader_demo.py",
                 "tests/test_hub_browser.py", "tests/test_site_browser.py", "tests/test_smollm2.py"):
        assert module_shares_fixtures(path), path
        assert scope_of(f"{path}::test_x[a]") == scope_of(f"{path}::test_y") == path


def test_other_tests_are_scheduled_one_by_one():
    # the notebook executions of test_pipeline spread over both workers
    for nodeid in ("tests/test_pipeline.py::test_a_correctly_filled_release_validates[10_learning]",
                   "tests/test_softmax.py::test_rows_sum_to_one"):
        assert not module_shares_fixtures(nodeid.split("::")[0])
        assert scope_of(nodeid) == nodeid
    assert not module_shares_fixtures("tests/no_such_file.py")
