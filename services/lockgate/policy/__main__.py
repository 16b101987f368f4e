"""``python -m lockgate.policy``."""

from lockgate.policy.app import create_app
from lockgate.runtime.entry import run_service

if __name__ == "__main__":
    run_service(create_app, "policy")
