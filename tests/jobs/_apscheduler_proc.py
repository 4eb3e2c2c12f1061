"""One APScheduler process of test_apscheduler.py: ``deliver(tag, core)`` every 0.5 s from the
wall-clock time ``start_at`` (both processes of a test fire at the same moments).

Usage: python _apscheduler_proc.py TAG CORE START_AT
"""
from __future__ import annotations

import datetime
import sys

from apscheduler.schedulers.blocking import BlockingScheduler

from _jobs import deliver

tag, core, start_at = sys.argv[1], sys.argv[2], float(sys.argv[3])
scheduler = BlockingScheduler(timezone=datetime.timezone.utc)
scheduler.add_job(deliver, "interval", seconds=0.5, args=[tag, core], max_instances=1, coalesce=True,
                  misfire_grace_time=5,
                  start_date=datetime.datetime.fromtimestamp(start_at, tz=datetime.timezone.utc))
scheduler.start()
