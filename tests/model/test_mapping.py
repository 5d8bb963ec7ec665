"""The model's steps and the SQL they stand for move together (ADR 0055).

``model/mapping.toml`` records, for every step the model marks
(``/* step: name */ ... /* end: name */``), the statements it stands for and a
fingerprint of each side. A change to a mapped statement, or to a step (its
text, or a macro or inline it uses), fails here and names what to re-check.
Needs no SPIN.
"""

from __future__ import annotations

import re

from tools import model_check


def test_the_model_and_the_sql_agree_with_the_recorded_mapping() -> None:
    problems = model_check.mapping_problems()
    assert not problems, "\n".join(problems)


def test_a_changed_statement_is_reported_with_the_step_to_recheck() -> None:
    steps = model_check.model_steps()
    entry = model_check.recorded_mapping()["claim"]
    refs = entry["sql"]
    assert isinstance(refs, list)
    sql, model = model_check._fingerprints(refs, steps["claim"])
    assert (sql, model) == (entry["sql_fingerprint"], entry["model_fingerprint"])
    changed = steps["claim"].replace("attempt[j]++", "skip")
    assert model_check._fingerprints(refs, changed)[1] != model


def test_a_step_reaches_the_macros_it_uses() -> None:
    # The claim's region names CLAIM; the fence's definitions ride along through it.
    assert "#define CLAIM(j)" in model_check.model_steps()["claim"]
    assert "#define FENCE(j, a)" in model_check.model_steps()["renew"]


def _adr() -> str:
    # Found by its title, so a renumbering moves only the file.
    (path,) = (model_check.ROOT / "docs" / "adr").glob("*-a-checked-model-of-the-kernel.md")
    return path.read_text(encoding="utf-8")


def test_the_adr_maps_every_step_to_its_statements() -> None:
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^\| `([a-z_]+)` \|([^\n]*)$", _adr(), re.MULTILINE)
    }
    for step, entry in model_check.recorded_mapping().items():
        assert step in rows, f"ADR 0055's table has no row for model step {step!r}"
        refs = entry["sql"]
        assert isinstance(refs, list)
        for ref in refs:
            name = str(ref).split(":", 1)[1]
            assert f"`{name}`" in rows[step], f"ADR 0055's row for {step!r} does not name {name}"
