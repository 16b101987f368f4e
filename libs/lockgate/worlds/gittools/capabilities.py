"""Five of ``mcp-server-git``'s functions as capabilities, wrapped as they are.

Each of its functions takes a ``git.Repo`` first; here that argument comes from the run's
trusted context (``repository``: the repository's path, opened as ``git.Repo`` in the
adapter process), never from the model, so a model can act only in the repository its run
was opened on. The model controls the rest (paths to stage, a branch name, a message),
with the package's own type hints as the schema.

- ``git.status`` and ``git.log``: reads;
- ``git.add`` and ``git.create_branch``: writes to the working copy's index and refs;
- ``git.commit``: a write that, under ``deploy/policies/gittools/``, waits for a reviewer.
"""

from __future__ import annotations

import git
from mcp_server_git import server as tools

from lockgate.adapters.sdk import Context, capability

#: The run-context key naming the repository, and how the adapter opens it.
REPOSITORY = {"repo": Context("repository", convert=git.Repo)}
RESOURCE = ("Repository", "repo")

status = capability(
    "git.status", effect="read", resource=RESOURCE, context=REPOSITORY,
    description="Show the working tree status of the repository you are working in.",
)(tools.git_status)

log = capability(
    "git.log", effect="read", resource=RESOURCE, context=REPOSITORY,
    description="Show the latest commits of the repository you are working in (max_count "
                "of them, optionally between two timestamps).",
)(tools.git_log)

add = capability(
    "git.add", effect="write", resource=RESOURCE, context=REPOSITORY,
    description="Stage files of the repository you are working in for the next commit.",
)(tools.git_add)

create_branch = capability(
    "git.create_branch", effect="write", resource=RESOURCE, context=REPOSITORY,
    description="Create a branch in the repository you are working in (from base_branch, "
                "or from the current branch).",
)(tools.git_create_branch)

commit = capability(
    "git.commit", effect="write", resource=RESOURCE, context=REPOSITORY,
    description="Commit the staged changes of the repository you are working in, with a "
                "message.",
    approval_hint="A commit is recorded in the repository's history.",
)(tools.git_commit)

#: What ``lockgate adapter serve lockgate.worlds.gittools.capabilities`` serves.
CAPABILITIES = [status, log, add, create_branch, commit]
