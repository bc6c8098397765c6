"""Selection table -> minimal, complete, numerically ordered rule sets (no file syntax here)."""

from __future__ import annotations

from tunempi.rules.ruleset import (
    DEFAULT_ALGORITHM,
    INTERPOLATED,
    LIBRARY,
    MEASURED,
    CommBlock,
    Coverage,
    Mismatch,
    MsgRule,
    PpnRules,
    RuleSet,
    between_rows,
    boundary,
    build_rule_set,
    build_rule_sets,
    check_equivalent,
    compress_row,
    find_mismatches,
    is_grid_size,
    ranges_text,
)
from tunempi.rules.table import ScaledChoice, SelectionTable

__all__ = [
    "DEFAULT_ALGORITHM", "INTERPOLATED", "LIBRARY", "MEASURED", "CommBlock", "Coverage", "Mismatch", "MsgRule",
    "PpnRules", "RuleSet", "ScaledChoice", "SelectionTable", "between_rows", "boundary",
    "build_rule_set", "build_rule_sets", "check_equivalent", "compress_row", "find_mismatches",
    "is_grid_size", "ranges_text",
]
