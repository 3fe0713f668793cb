"""`relatedProjects` in package.json, and the rule that both projects name each other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.related_projects import GHOST, HELPER, MAIN, STRANGER, write_projects
from tests.workflows.test_project import PROJECT_ID, minimal_package, write_project
from webui.errors import ProjectError
from webui.workflows.project import load_project
from webui.workflows.related import RelatedProjectError, RelatedRef, confirm_relation, declared

OTHER = "22222222-2222-4222-8222-222222222222"


def load_with(tmp_path: Path, related: Any) -> Any:
    package = minimal_package()
    package["relatedProjects"] = related
    return load_project(write_project(tmp_path / "p", package))


def test_related_projects_are_parsed_with_lowercase_ids(tmp_path: Path) -> None:
    project = load_with(tmp_path, [{"alias": "docs", "id": OTHER.upper()}, {"alias": "b_2-x", "id": GHOST}])
    assert project.related == (RelatedRef("docs", OTHER), RelatedRef("b_2-x", GHOST))
    assert load_project(write_project(tmp_path / "q", minimal_package())).related == ()


@pytest.mark.parametrize(
    ("related", "message"),
    [
        ({"alias": "a", "id": OTHER}, "relatedProjects: expected a list of {alias, id} objects, got dict"),
        (["docs"], "relatedProjects[0]: expected an object with alias and id"),
        ([{"id": OTHER}], "relatedProjects[0].alias: is required"),
        ([{"alias": "9x", "id": OTHER}], "relatedProjects[0].alias: '9x' is not a valid alias"),
        ([{"alias": "a b", "id": OTHER}], "relatedProjects[0].alias: 'a b' is not a valid alias"),
        ([{"alias": "a"}], "relatedProjects[0].id: is required"),
        ([{"alias": "a", "id": "nope"}], "relatedProjects[0].id: 'nope' is not a UUID"),
        ([{"alias": "a", "id": PROJECT_ID}], "relatedProjects[0].id: a project cannot be related to itself"),
        (
            [{"alias": "a", "id": OTHER}, {"alias": "a", "id": GHOST}],
            "relatedProjects[1].alias: duplicate alias 'a'",
        ),
        (
            [{"alias": "a", "id": OTHER}, {"alias": "b", "id": OTHER}],
            f"relatedProjects[1].id: project {OTHER} is already related",
        ),
    ],
)
def test_bad_related_projects_name_the_field(tmp_path: Path, related: Any, message: str) -> None:
    with pytest.raises(ProjectError) as err:
        load_with(tmp_path, related)
    assert str(tmp_path / "p" / "package.json") in err.value.message
    assert message in err.value.message


def test_a_relation_holds_only_when_both_projects_name_each_other(tmp_path: Path) -> None:
    folders = write_projects(tmp_path)
    main, helper, stranger = (load_project(folders[k]) for k in ("main", "helper", "stranger"))
    assert confirm_relation(main, "helper", helper) == RelatedRef("helper", HELPER)
    assert confirm_relation(helper, "main", main) == RelatedRef("main", MAIN)
    with pytest.raises(RelatedProjectError) as one_sided:
        confirm_relation(main, "stranger", stranger)
    assert f"'stranger' ({STRANGER}) does not name project {MAIN} back" in one_sided.value.message
    with pytest.raises(RelatedProjectError) as wrong:
        confirm_relation(main, "helper", stranger)
    assert (
        f"is project {STRANGER}, but relatedProjects of project {MAIN} names {HELPER}" in wrong.value.message
    )
    with pytest.raises(RelatedProjectError) as unknown:
        declared(main, "nope")
    assert "'nope' is not declared" in unknown.value.message
    assert "(declared: 'helper', 'stranger', 'ghost')" in unknown.value.message
