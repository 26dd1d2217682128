"""A checkpoint is validated once per write: serialised and checked, then stored unparsed."""

from __future__ import annotations

import pytest

from planq.domain import jobs as jobs_module
from planq.domain.clock import utcnow
from planq.domain.errors import BoundsError
from planq.domain.ids import new_id
from planq.domain.jobs import AsyncJob, serialise_checkpoint
from planq.domain.plans import PlanPhase
from planq.store import in_memory_ledger


def test_a_serialised_checkpoint_is_not_parsed_again_but_other_text_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed: list[str] = []
    parse = jobs_module.check_json_text

    def counting(field: str, text: object, max_bytes: int) -> object:
        parsed.append(field)
        return parse(field, text, max_bytes)

    monkeypatch.setattr(jobs_module, "check_json_text", counting)  # still parses: a spy
    jobs, _ = in_memory_ledger()
    job = AsyncJob(plan_id=new_id(), phase=PlanPhase.execute)
    jobs.add(job)
    assert jobs.claim(job.job_id, "worker-a", utcnow())

    assert jobs.save_progress(job.job_id, 0.5, serialise_checkpoint({"next": 2}), "worker-a")
    assert parsed == []  # checked when it was serialised, not again at the store
    assert jobs.save_progress(job.job_id, 0.6, '{"next": 3}', "worker-a")
    assert parsed == ["checkpoint_json"]  # text from elsewhere is parsed, once

    stored = jobs.get(job.job_id)
    assert stored is not None and stored.checkpoint == {"next": 3}


def test_serialising_a_checkpoint_is_the_check() -> None:
    with pytest.raises(BoundsError, match="checkpoint"):
        serialise_checkpoint({"x": float("nan")})
    deep: dict[str, object] = {}
    for _ in range(100):
        deep = {"d": deep}
    with pytest.raises(BoundsError, match="checkpoint"):
        serialise_checkpoint(deep)
    assert type(jobs_module.check_checkpoint_json(serialise_checkpoint({"a": 1}))) is str
