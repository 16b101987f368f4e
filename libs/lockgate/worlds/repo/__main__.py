"""``python -m lockgate.worlds.repo``: one worker serving the five repository capabilities."""

from __future__ import annotations

import logging

from lockgate.adapters.sdk import run_adapter
from lockgate.runtime import loop
from lockgate.runtime.entry import exit_if_misconfigured
from lockgate.runtime.settings import Settings
from lockgate.worlds.repo.adapter import RepoWorldSettings, build_adapters


def main() -> None:
    """Open (or seed) the repository world and serve its capabilities until stopped."""
    with exit_if_misconfigured("adapter.repo"):
        settings = Settings()
        logging.basicConfig(level=settings.log_level)
        adapters = build_adapters(RepoWorldSettings())
        loop.run(run_adapter(list(adapters), settings, name="repo"))


if __name__ == "__main__":
    main()
