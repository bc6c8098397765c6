"""Results unchanged: what an application computed, extracted from each run and compared with the default's.

A tuner that speeds up a wrong answer is a failure, so `compare` extracts the result of every run:
- `--result REGEX` (repeatable): every match in the run's output (stdout and stderr), in order; a
  pattern with groups contributes its groups, else the whole match;
- `--result-command CMD`: a shell command run in the same directory after each run, with the run's
  output in the file named by $TUNEMPI_RUN_OUTPUT; its stdout is the result (e.g. a checksum of an output
  file, or `grep` of the file an application writes).
The extracted text is split into tokens: numbers are compared within a relative `tolerance` (reductions
in another order round differently: a changed allreduce algorithm may move the last digits of a sum),
every other token exactly. No match at all is a failed check, never a silent pass.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from tunempi.errors import UsageError

DEFAULT_TOLERANCE = 1e-6
#: Seconds a result command may take.
COMMAND_TIMEOUT_S = 120.0
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf|nan)\b", re.IGNORECASE)


class ResultUnavailable(Exception):
    """The check found nothing to compare (no match, the command failed)."""


def tokens(text: str) -> list[str | float]:
    """Numbers as floats, everything else as words: '  E = -6.77 (step 50)' -> ['E', '=', -6.77, '(step', 50.0, ')']."""
    out: list[str | float] = []
    for word in text.split():
        position = 0
        for match in _NUMBER.finditer(word):
            if match.start() > position:
                out.append(word[position:match.start()])
            out.append(float(match.group(0)))
            position = match.end()
        if position < len(word):
            out.append(word[position:])
    return out


def _close(a: float, b: float, tolerance: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if a == b:
        return True
    return abs(a - b) <= tolerance * max(abs(a), abs(b))


def difference(reference: str, found: str, tolerance: float) -> str | None:
    """None when `found` is `reference` within `tolerance`; else where they first differ, in words."""
    ref, got = tokens(reference), tokens(found)
    for index, (a, b) in enumerate(zip(ref, got, strict=False)):
        if isinstance(a, float) and isinstance(b, float):
            if not _close(a, b, tolerance):
                relative = abs(a - b) / max(abs(a), abs(b)) if max(abs(a), abs(b)) > 0 else math.inf
                return f"value {index + 1}: {b:.10g} instead of {a:.10g} (relative difference {relative:.2g} > " \
                       f"tolerance {tolerance:g})"
        elif a != b:
            return f"token {index + 1}: {b!r} instead of {a!r}"
    if len(ref) != len(got):
        return f"{len(got)} tokens instead of {len(ref)}"
    return None


@dataclass(frozen=True)
class ResultCheck:
    """How a run's result is extracted (patterns and/or a command) and how close is unchanged."""

    patterns: tuple[str, ...] = ()
    command: str | None = None
    tolerance: float = DEFAULT_TOLERANCE

    def __post_init__(self) -> None:
        for pattern in self.patterns:
            try:
                re.compile(pattern, re.MULTILINE)
            except re.error as exc:
                raise UsageError(f"--result {pattern!r} is not a valid regular expression: {exc}") from None
        if not (0.0 <= self.tolerance < 1.0) or math.isnan(self.tolerance):
            raise UsageError(f"--tolerance must be in [0, 1) (relative), got {self.tolerance}")

    @property
    def active(self) -> bool:
        return bool(self.patterns) or self.command is not None

    def describe(self) -> str:
        parts = [f"--result {p!r}" for p in self.patterns]
        if self.command is not None:
            parts.append(f"--result-command {self.command!r}")
        return ", ".join(parts) + f" (numbers within {self.tolerance:g} relative)" if parts else "none"

    def extract(self, output: str, cwd: str | None = None, env: dict[str, str] | None = None) -> str:
        """The result text of one run; ResultUnavailable when a pattern matches nothing or the command fails."""
        lines: list[str] = []
        for pattern in self.patterns:
            compiled = re.compile(pattern, re.MULTILINE)
            found = [" ".join(g for g in m.groups() if g is not None) if m.groups() else m.group(0)
                     for m in compiled.finditer(output)]
            if not found:
                raise ResultUnavailable(f"--result {pattern!r} matched nothing in the output")
            lines.extend(found)
        if self.command is not None:
            lines.append(self._run_command(output, cwd, env))
        return "\n".join(lines)

    def _run_command(self, output: str, cwd: str | None, env: dict[str, str] | None) -> str:
        with tempfile.NamedTemporaryFile("w", prefix="tunempi-run-", suffix=".out", delete=False) as handle:
            handle.write(output)
        try:
            done = subprocess.run(["/bin/sh", "-c", self.command or ""], cwd=cwd, capture_output=True, text=True,
                                  env={**(env if env is not None else os.environ), "TUNEMPI_RUN_OUTPUT": handle.name},
                                  timeout=COMMAND_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise ResultUnavailable(f"--result-command took more than {COMMAND_TIMEOUT_S:g} s") from None
        finally:
            os.unlink(handle.name)
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1][:200]
            raise ResultUnavailable(f"--result-command exited with {done.returncode}: {tail}")
        if not done.stdout.strip():
            raise ResultUnavailable("--result-command printed nothing")
        return done.stdout.strip()


def first_difference(reference: str, results: Sequence[tuple[int, str]], tolerance: float) -> tuple[int, str] | None:
    """(block, what differs) of the first of `results` ((block, text) pairs) not equal to `reference`."""
    for block, text in results:
        why = difference(reference, text, tolerance)
        if why is not None:
            return block, why
    return None
