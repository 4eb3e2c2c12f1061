"""The Dramatiq actor of test_dramatiq.py: ``deliver`` of _jobs.py, on the test's Redis broker."""
from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

dramatiq.set_broker(RedisBroker(url=os.environ["JOBS_BROKER"]))

from _jobs import deliver  # noqa: E402

deliver_actor = dramatiq.actor(deliver, actor_name="deliver", max_retries=0)
