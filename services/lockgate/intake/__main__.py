"""``python -m lockgate.intake``."""

from lockgate.intake.app import create_app
from lockgate.runtime.entry import run_service

if __name__ == "__main__":
    run_service(create_app, "intake")
