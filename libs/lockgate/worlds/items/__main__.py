"""``python -m lockgate.worlds.items``: one worker serving both items capabilities."""

from __future__ import annotations

import logging

from lockgate.adapters.sdk import run_adapter
from lockgate.runtime import loop
from lockgate.runtime.entry import exit_if_misconfigured
from lockgate.runtime.settings import Settings
from lockgate.worlds.items.adapter import ItemsWorldSettings, build_adapters


def main() -> None:
    """Open (or seed) the items world; serve ``draft.prepare_private`` and ``item.publish``."""
    with exit_if_misconfigured("adapter.items"):
        settings = Settings()
        logging.basicConfig(level=settings.log_level)
        adapters = build_adapters(ItemsWorldSettings())
        loop.run(run_adapter(list(adapters), settings, name="items"))


if __name__ == "__main__":
    main()
