"""The search's parameter spaces: what `tunempi search` explores.

expressions.py  safe boolean expressions (`when` conditions, constraints), `Value`, `Config`
params.py       int / float / categorical parameters and `ParamSpace` (JSON round-trip, grids, sampling)
ranges.py       the 'start:step:end' range syntax shared by both file formats
toml.py         TOML space files (docs/search.md)
ptf.py          PTF MPI Parameters plugin files
load.py         `load_space(path)`: any of the above by file format
"""

from __future__ import annotations

from tunempi.search.space.expressions import Config, Expr, Value
from tunempi.search.space.load import load_space
from tunempi.search.space.params import (
    CategoricalParam,
    FloatParam,
    IntParam,
    Param,
    ParamSpace,
    config_key,
    param_from_dict,
    product_size,
)
from tunempi.search.space.ptf import parse_ptf
from tunempi.search.space.ranges import parse_range
from tunempi.search.space.toml import parse_toml

__all__ = [
    "CategoricalParam", "Config", "Expr", "FloatParam", "IntParam", "Param", "ParamSpace", "Value",
    "config_key", "load_space", "param_from_dict", "parse_ptf", "parse_range", "parse_toml", "product_size",
]
