from librarian_dagster.core.digest.tags import MAX_TAGS, normalize_tag, normalize_tags


def test_one_spelling_per_tag():
    assert normalize_tag("PostgreSQL") == "postgres"
    assert normalize_tag(" Unit Tests ") == "testing"
    assert normalize_tag("#CI") == "ci"
    assert normalize_tag("C++") == "cpp"
    assert normalize_tag("github_actions") == "github"
    assert normalize_tag("Dagster Sensors") == "dagster-sensors"
    assert normalize_tag("!!!") == ""


def test_tags_are_deduplicated_after_normalising_and_capped():
    assert normalize_tags(["Python", "py", "python3", "Testing", "tests", ""]) == [
        "python",
        "testing",
    ]
    assert len(normalize_tags(f"tag{i}" for i in range(20))) == MAX_TAGS


def test_the_offline_digesters_vocabulary_is_already_canonical():
    from librarian_dagster.core.digest.offline import _COMMAND_TAGS, _LANGUAGES

    for tag in {*_LANGUAGES.values(), *_COMMAND_TAGS.values()}:
        assert normalize_tag(tag) == tag
