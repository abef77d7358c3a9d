"""A campaign in a child process, for the kill-and-resume test: ``python child_run.py KIND URL DB``.

Measurement is slowed a little so that the parent's SIGKILL lands inside a run, not between runs.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loopback.services import ScriptedServices  # noqa: E402

from atb_agent.campaign import CampaignSpec, run_campaign  # noqa: E402


class SlowServices(ScriptedServices):
    def evaluator(self, task: Any, store: Any, protocol: Any) -> Any:
        judge = super().evaluator(task, store, protocol)
        inner = judge.evaluate

        def evaluate(iteration: int, files: dict[str, bytes]) -> Any:
            time.sleep(0.4)
            return inner(iteration, files)

        judge.evaluate = evaluate  # type: ignore[method-assign]
        return judge


if __name__ == "__main__":
    kind, url, db = sys.argv[1:4]
    store: Any = db if "://" in db else Path(db)      # a PostgreSQL URL (issue 28) or a SQLite file
    run_campaign(CampaignSpec(task="gelu", tuner=f"{kind}:scripted-model", budget=3, seed=7, store=store,
                              base_url=url, scripted=True), services=SlowServices())
