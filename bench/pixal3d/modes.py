"""The benchmark's run modes (``bench.pixal3d.worker --mode``), in the order they alternate."""

#: eager: the port's own loading; staged: one stage's models at a time; budget: staged with a
#: keep-resident budget. ("alone", the stages' working memory without models, runs once first.)
MODES = ("eager", "staged", "budget")
MODE_TITLES = {"eager": "eager", "staged": "staged", "budget": "staged+budget"}
