"""Collects no test on purpose: pytest exits 5, and the ctest
python.no_tests_fails (WILL_FAIL) checks that such a run fails."""
