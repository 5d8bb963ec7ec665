"""The kernel's model (model/drover.pml, ADR 0055) checked by SPIN: the model holds every
invariant, and each planted bug breaks the invariant it names.

Each check runs ``spin -a``, compiles the verifier and searches the whole state
space (``tools.model_check``). Without ``spin`` or a C compiler the tests are
skipped, unless ``DROVER_REQUIRE_SPIN=1`` (set by ``.ci/run`` once it installed
Debian's spin) turns the absence into a failure. The whole-kernel check
(``--full``, about ten million states) is left to ``python -m tools.model_check --full``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tools import model_check
from tools.model_check import CHECKS, Check

_MODEL = [c for c in CHECKS if c.expect is None and not c.full]
# The planted bugs, and the leader overlap ADR 0040 accepts (a lease leader beside a lock leader).
_BUGS = [c for c in CHECKS if c.expect is not None]


@pytest.fixture(scope="module")
def spin() -> None:
    """Skip without spin and a C compiler (fail with ``DROVER_REQUIRE_SPIN=1``)."""
    reason = model_check.missing_tools()
    if reason is None:
        return
    if os.environ.get("DROVER_REQUIRE_SPIN") == "1":
        pytest.fail(f"{reason}, and DROVER_REQUIRE_SPIN=1")
    pytest.skip(reason)


@pytest.mark.parametrize(
    "check",
    # The kernel's checks search a million states or more: several seconds each.
    [pytest.param(c, marks=[pytest.mark.slow] if "-DKERNEL" in c.defines else []) for c in _MODEL],
    ids=[c.name for c in _MODEL],
)
def test_the_model_holds_every_invariant(spin: None, check: Check, tmp_path: Path) -> None:
    result = model_check.run(check, workdir=tmp_path)
    assert result.verdict == "passed", f"{result.line()}\n{result.detail}\n" + "\n".join(
        result.trail
    )
    assert result.states > 1000  # a real search, not an empty model


@pytest.mark.parametrize("check", _BUGS, ids=[c.name for c in _BUGS])
def test_each_counterexample_check_breaks_its_invariant(
    spin: None, check: Check, tmp_path: Path
) -> None:
    result = model_check.run(check, workdir=tmp_path)
    assert result.verdict == "counterexample", result.line()
    assert result.invariant == check.expect, result.line()
    # The replayed counterexample is a sequence of the model's steps.
    assert result.trail, result.detail
    assert any("claims job" in step or "holds the lease" in step for step in result.trail)


def test_every_invariant_is_broken_by_some_planted_bug() -> None:
    assert {c.expect for c in _BUGS} == set(model_check.INVARIANTS)


def test_every_check_is_named_once() -> None:
    names = [c.name for c in CHECKS]
    assert len(names) == len(set(names))
