"""Teaching tools on top of the engine: grading in an isolated process (:mod:`.sandbox`) and playable
levels (:mod:`.levels`)."""
