"""Prints the conformance suite's counts and lists (the library's own failures included) after the run."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ARG001 - pytest's hook signature
    from test_conformance import REPORT

    if not REPORT:
        return
    terminalreporter.section("collective conformance (docs/conformance.md)")
    for (layout, mode), lines in REPORT.items():
        terminalreporter.write_line(f"{layout} | {mode} | {lines[0]}")
        for line in lines[1:]:
            terminalreporter.write_line(f"    {line}")
