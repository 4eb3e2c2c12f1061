"""Progress of a comparison run on stderr: rich, else tqdm, else plain lines (logs and CI)."""
from __future__ import annotations

import sys


class Progress:
    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total = total
        self.done = 0
        self._rich = self._tqdm = None
        if not enabled or not sys.stderr.isatty():  # plain lines in logs and CI
            return
        try:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RichProgress,
                                       TextColumn, TimeElapsedColumn, TimeRemainingColumn)

            self._rich = RichProgress(
                TextColumn("[bold]{task.description:<40}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), TimeRemainingColumn(), transient=False,
            )
            self._rich.start()
            self._task = self._rich.add_task("benchmarks", total=total)
        except ImportError:
            try:
                from tqdm import tqdm

                self._tqdm = tqdm(total=total, unit="job", dynamic_ncols=True)
            except ImportError:
                pass

    def describe(self, text: str) -> None:
        if self._rich is not None:
            self._rich.update(self._task, description=text[:40])
        elif self._tqdm is not None:
            self._tqdm.set_description(text[:40])

    def advance(self, text: str) -> None:
        self.done += 1
        if self._rich is not None:
            self._rich.update(self._task, advance=1)
        elif self._tqdm is not None:
            self._tqdm.update(1)
        else:
            print(f"[{self.done}/{self.total}] {text}", file=sys.stderr, flush=True)

    def log(self, text: str) -> None:
        if self._rich is not None:
            self._rich.console.print(text, markup=False, highlight=False)
        elif self._tqdm is not None:
            self._tqdm.write(text)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()
        elif self._tqdm is not None:
            self._tqdm.close()


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
