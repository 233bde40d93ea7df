"""Pushing staged folders to the Hub: one commit per repository and branch (the `bert` export and the `step-N`
checkpoints are branches from main's commit), tags, the collection; a Hub that cannot be reached is reported in one
line naming what was pushed."""

import sys
from collections.abc import Iterable
from pathlib import Path

from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, constants
from huggingface_hub.errors import HfHubHTTPError, RevisionNotFoundError
from huggingface_hub.utils.sha import git_hash

from ..cli import UserError
from .hub_compat import RepoFile
from .options import ReleaseOptions
from .plan import Stage, sha256


def staged_files(folder: Path) -> list[str]:
    """The staged files' paths in the repository (.eval_results/glue.yaml included)."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def remote_files(api: HfApi, repo_id: str, revision: str) -> dict[str, RepoFile]:
    """{path: RepoFile} of a revision on the Hub ({} if it does not exist), without .gitattributes."""
    try:
        tree = api.list_repo_tree(repo_id, revision=revision, recursive=True)
        return {f.path: f for f in tree if isinstance(f, RepoFile) and f.path != ".gitattributes"}
    except RevisionNotFoundError:
        return {}


def remote_state(api: HfApi, stage: Stage) -> str:
    """The stage's revision on the Hub: empty, the same files (by git or LFS hash) as staged, or different."""
    remote = remote_files(api, stage.repo_id, stage.revision)
    if not remote:
        return "empty"
    local = staged_files(stage.folder)
    if sorted(remote) != local:
        return "different"
    for name in local:
        path, file = stage.folder / name, remote[name]
        if (file.lfs.sha256 != sha256(path)) if file.lfs else (file.blob_id != git_hash(path.read_bytes())):
            return "different"
    return "same"


def hub_errors() -> tuple[type[Exception], ...]:
    """What huggingface_hub raises when the Hub cannot be reached or refuses a request: OfflineModeIsEnabled (a
    ConnectionError), HfHubHTTPError, and the transport errors of the HTTP library it has imported: requests'
    (huggingface_hub 0.x), httpx's (1.x) or httpx2's (2.x). Nothing is imported here that it did not import."""
    errors = [ConnectionError, TimeoutError, HfHubHTTPError]
    for library, names in (
        ("requests", ("ConnectionError", "Timeout")),
        ("httpx", ("TransportError",)),
        ("httpx2", ("TransportError",)),
    ):
        if library in sys.modules:
            errors += [getattr(sys.modules[library], name) for name in names]
    return tuple(errors)


def push_or_explain(stages: list[Stage], api: HfApi, options: ReleaseOptions) -> None:
    """`push`, with a Hub that cannot be reached (or refuses a request) reported in one line saying what was pushed."""
    pushed = []
    try:
        push(stages, api, options, pushed)
    except hub_errors() as error:
        problem = (
            "the Hugging Face Hub refused a request"
            if isinstance(error, HfHubHTTPError)
            else "cannot reach the Hugging Face Hub"
        )
        done = f"pushed before it stopped: {'; '.join(pushed)}" if pushed else "nothing was pushed"
        raise UserError(f"{problem} ({constants.ENDPOINT}: {type(error).__name__}: {error}): {done}.") from None


def push(stages: list[Stage], api: HfApi, options: ReleaseOptions, pushed: list[str]) -> None:
    """Create, upload (one commit per revision), tag, branch and collect, listing what is done in `pushed`; every
    repository is checked first, so a conflict stops the release before anything is written."""
    repos = {}
    for stage in stages:
        repos.setdefault(stage.repo_id, []).append(stage)
    to_push, conflicts = {}, []
    for repo_id, repo_stages in repos.items():
        exists = api.repo_exists(repo_id)
        states = {remote_state(api, stage) for stage in repo_stages} if exists else {"empty"}
        if states == {"same"}:
            print(f"{repo_id}: already holds exactly these files; nothing to upload")
            continue
        if "different" in states and not options.force:
            conflicts.append(repo_id)
        elif exists and options.tag in {t.name for t in api.list_repo_refs(repo_id).tags}:
            raise UserError(
                f"{repo_id} already has the tag {options.tag!r}; pass a new --tag for this release. Nothing was pushed."
            )
        to_push[repo_id] = (repo_stages, exists)
    if conflicts:
        raise UserError(
            f"These repositories exist with different content: {', '.join(conflicts)}. Pass --force to replace their "
            "content (a new commit; the history stays), or choose another --namespace/--name_template. Nothing was pushed."
        )

    for repo_id, (repo_stages, existed) in to_push.items():
        main, branches = repo_stages[0], repo_stages[1:]
        api.create_repo(repo_id, repo_type="model", private=options.private, exist_ok=True)
        pushed.append(f"created {repo_id}")
        stale = set(remote_files(api, repo_id, "main")) - set(staged_files(main.folder)) if existed else set()
        commit = api.create_commit(
            repo_id,
            operations=operations(main.folder, delete=stale),
            revision="main",
            commit_message=f"Release {repo_id.split('/')[1]} ({options.tag})",
        )
        pushed.append(f"{repo_id} main")
        api.create_tag(repo_id, tag=options.tag, revision=commit.oid)
        pushed.append(f"{repo_id} tag {options.tag}")
        print(f"{repo_id}: pushed main ({commit.oid[:10]}), tagged {options.tag}")
        existing_branches = {b.name for b in api.list_repo_refs(repo_id).branches} if existed else set()
        for stage in branches:
            if stage.revision in existing_branches:
                api.delete_branch(repo_id, branch=stage.revision)
            api.create_branch(repo_id, branch=stage.revision, revision=commit.oid)
            stale = set(staged_files(main.folder)) - set(staged_files(stage.folder))  # main's code, for the export
            api.create_commit(
                repo_id,
                operations=operations(stage.folder, delete=stale),
                revision=stage.revision,
                commit_message=branch_commit_message(stage, options.tag),
            )
            pushed.append(f"{repo_id} branch {stage.revision}")
            print(f"{repo_id}: pushed branch {stage.revision}")

    if options.collection:
        collection = api.create_collection(options.collection, namespace=options.namespace, exists_ok=True)
        for repo_id in repos:
            api.add_collection_item(collection.slug, repo_id, "model", exists_ok=True)
            pushed.append(f"{repo_id} in collection {collection.slug}")
        print(f"collection {collection.slug}: {len(repos)} models")


def branch_commit_message(stage: Stage, tag: str) -> str:
    if stage.bert_export:
        return f"Plain BERT export of {tag} (no remote code)"
    return f"Checkpoint {stage.revision}"


def branch_description(stage: Stage) -> str:
    if stage.bert_export:
        return "a branch from main's commit: the plain BERT export of main, loaded without remote code"
    return "a branch from main's commit"


def operations(folder: Path, delete: Iterable[str] = ()) -> list[CommitOperationAdd | CommitOperationDelete]:
    adds = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(folder / name)) for name in staged_files(folder)]
    return adds + [CommitOperationDelete(path_in_repo=name) for name in sorted(delete)]


def show(stages: list[Stage], options: ReleaseOptions) -> None:
    """What --push would do."""
    for stage in stages:
        files = staged_files(stage.folder)
        size = sum((stage.folder / n).stat().st_size for n in files)
        where = f"tag {options.tag}" if stage.revision == "main" else branch_description(stage)
        print(
            f"\n{stage.repo_id} @ {stage.revision} ({where}): {len(files)} files, {size / 1e6:.1f} MB, staged in {stage.folder}"
        )
        for name in files:
            print(f"    {name:<28} {(stage.folder / name).stat().st_size:>12,} bytes")
    if options.collection:
        print(f"\ncollection {options.collection!r} in {options.namespace}: {len({s.repo_id for s in stages})} models")
