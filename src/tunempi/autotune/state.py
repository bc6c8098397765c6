"""The work directory's state file (`autotune-state.json`): which steps finished, and what each found.

A step counts as finished only once its result is in this file, written atomically (a temporary file, then
os.replace): a stop signal between the two leaves the previous state, and the step runs again, resuming from
its own store (tune's and compare's results database, online's state directory, search's journal). The file
also holds what the command was asked (`key`): the same work directory under another command is refused,
so a rerun never mixes two applications' steps; unless no step of it had finished (its first step failed:
a launch line the library refused), when the other command's state is replaced (`replaced` says so), so the
corrected command needs no --restart.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tunempi.errors import UsageError

STATE_NAME = "autotune-state.json"
KIND = "tunempi-autotune"
VERSION = 1


class WorkState:
    """The finished steps of one work directory."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self.path = self.directory / STATE_NAME
        self.key: dict[str, Any] = {}
        self.steps: dict[str, dict[str, Any]] = {}
        #: What `open` replaced: another command's state that had finished no step (None: nothing replaced).
        self.replaced: str | None = None

    @classmethod
    def open(cls, directory: Path | str, key: Mapping[str, Any], *, restart: bool = False) -> WorkState:
        """The state of `directory` for the command described by `key` (created when absent; forgotten with
        `restart`, or replaced where it is another command's with no step finished); UsageError when the
        directory holds another command's state with a finished step."""
        state = cls(directory)
        state.key = json.loads(json.dumps(dict(key)))  # as it reads back from the file
        if restart or not state.path.is_file():
            state.save()
            return state
        try:
            data = json.loads(state.path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise UsageError(f"{state.path} is not readable ({exc}); rerun with --restart to start over") from None
        if not isinstance(data, dict) or data.get("kind") != KIND:
            raise UsageError(f"{state.path} is not a tunempi autotune state file")
        if data.get("key") != state.key:
            differs = sorted(k for k in {*state.key, *data.get("key", {})}
                             if state.key.get(k) != data.get("key", {}).get(k))
            if not data.get("steps"):  # nothing of it to mix with this command's steps
                state.replaced = (f"{state.path}: another autotune command's state (it differed in "
                                  f"{', '.join(differs)}), where no step had finished, replaced by this command's")
                state.save()
                return state
            raise UsageError(f"{state.directory} holds the work of another autotune command (it differs in "
                             f"{', '.join(differs)}): give another --out, or --restart to start over there")
        state.steps = {str(name): dict(result) for name, result in data.get("steps", {}).items()}
        return state

    def done(self, name: str) -> bool:
        return name in self.steps

    def result(self, name: str) -> dict[str, Any]:
        return self.steps.get(name, {})

    def finish(self, name: str, result: Mapping[str, Any]) -> None:
        """Record a finished step (atomically)."""
        self.steps[name] = json.loads(json.dumps(dict(result)))
        self.save()

    def save(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".json.tmp")
        temporary.write_text(json.dumps({"kind": KIND, "version": VERSION, "key": self.key, "steps": self.steps},
                                        indent=1) + "\n", encoding="utf-8")
        os.replace(temporary, self.path)
        return self.path
