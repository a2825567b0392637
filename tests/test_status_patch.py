"""The status patch (``status_patch``): a merge patch keeps what it does not name, so a field an
object of the status lost goes as null; fields the job loop does not write are left alone.
Pure; that the API server then holds exactly the new record: tests/test_status_writer.py."""

from __future__ import annotations

from ddp_operator.decide.status_patch import merge_patch

EXITED = {"attempt": 0, "reason": "Error", "exitCode": 3, "source": "TerminationMessage"}
STALLED = {"attempt": 1, "reason": "Stalled", "message": "the training's step has not advanced"}


def apply(target: dict, patch: dict) -> dict:
    """RFC 7386, as the API server applies a merge patch."""
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict):
            out[k] = apply(out.get(k) if isinstance(out.get(k), dict) else {}, v)
        else:
            out[k] = v
    return out


def test_a_failure_record_replaced_by_one_with_fewer_fields_keeps_none_of_the_old_ones() -> None:
    old = {"restarts": 1, "firstFailure": EXITED, "progress": {"step": 24}}
    new = {"restarts": 2, "firstFailure": STALLED}
    patch = merge_patch(old, new)
    assert patch == {
        "restarts": 2,
        "firstFailure": {"exitCode": None, "source": None, **STALLED},
    }
    assert apply(old, patch) == {**new, "progress": {"step": 24}}  # the desk's field kept


def test_only_what_changed_is_sent_and_a_cleared_object_goes_whole() -> None:
    old = {"restarts": 1, "firstFailure": EXITED, "goodput": {"startStep": 0, "lost": 3}}
    assert merge_patch(old, {"restarts": 1, "firstFailure": EXITED}) == {}
    moved = {"startStep": 0, "lost": 5}
    assert merge_patch(old, {"goodput": moved}) == {"goodput": {"lost": 5}}
    assert merge_patch(old, {"firstFailure": None}) == {"firstFailure": None}
    assert merge_patch({}, {"firstFailure": EXITED}) == {"firstFailure": EXITED}
    nested = {"a": {"b": {"c": 1, "d": 2}}}
    assert merge_patch(nested, {"a": {"b": {"c": 1}}}) == {"a": {"b": {"d": None}}}
    listed = {"excludedNodes": [{"node": "n1"}, {"node": "n2"}]}
    assert merge_patch(listed, {"excludedNodes": [{"node": "n2"}]}) == {
        "excludedNodes": [{"node": "n2"}]  # a list is replaced whole
    }
