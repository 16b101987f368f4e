"""One rule for a test whose prerequisite is missing: a CI run fails, any other run skips loudly."""

from __future__ import annotations

import pytest

from tests.conftest import require


@pytest.mark.parametrize("ci", ["true", "1", "yes", "TRUE", "github-actions"])
def test_a_ci_run_fails_where_a_prerequisite_is_missing(ci: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match="CI must run this test: no widget"):
        require(False, "no widget")


@pytest.mark.parametrize("ci", [None, "", "0", "false", "False"])
def test_any_other_run_skips_and_says_why(ci: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception, match="NOT RUN on this machine.*no widget"):
        require(False, "no widget")


@pytest.mark.parametrize("ci", [None, "true", "0"])
def test_a_present_prerequisite_neither_skips_nor_fails(ci: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    require(True, "no widget")
