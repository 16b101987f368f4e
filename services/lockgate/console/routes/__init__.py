"""The console's routes, one router per resource, in the order the app includes them."""

from __future__ import annotations

from fastapi import APIRouter

from lockgate.console.routes import intents, live, outcomes, page, people, reviews, shadow

ROUTERS: tuple[APIRouter, ...] = (
    page.router, people.router, intents.router, reviews.router, outcomes.router, shadow.router,
    live.router)
