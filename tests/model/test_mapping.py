"""The model's steps and the SQL they stand for move together (ADR 0055).

``model/mapping.toml`` records, for every step the model marks
(``/* step: name */ ... /* end: name */``), the statements it stands for and a
fingerprint of each side. A change to a mapped statement, or to a step (its
text, or a macro or inline it uses), fails here and names what to re-check.
Needs no SPIN.
"""

from __future__ import annotations

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
