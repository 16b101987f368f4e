"""Grading agents' proposals and the boundary's containment apart, from the record and the worlds.

``evaluate`` (``report``) over recorded histories and world writes (``ledgers``); the
scripted-agent suite (``suite``) drives the real system with tasks written as YAML.
"""

from lockgate.evaluation.quality import Part, Quality, grade
from lockgate.evaluation.report import Containment, Invariant, Report, as_json, evaluate, render

__all__ = ["Containment", "Invariant", "Part", "Quality", "Report", "as_json", "evaluate", "grade",
           "render"]
