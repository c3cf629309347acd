"""``python -m harness.language.kinds``: regenerate the schema's entry definitions and the README's kind table."""

from harness.language.kinds.docs import README_PATH, SCHEMA_PATH, write

write()
print(f"wrote {SCHEMA_PATH} and the check-kinds table of {README_PATH}")
