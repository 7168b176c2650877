"""Teaching tools on top of the engine: the course's notebooks (:mod:`.notebooks`), running one
(:mod:`.run`), the assignments and their graders (:mod:`.assignments`), grading a submission (:mod:`.grade`)
in an isolated process (:mod:`.sandbox`), a classroom's folder of them (:mod:`.classroom`), the otter export
(:mod:`.otter`), the Redis Cluster lesson (:mod:`.cluster_lesson`) and playable levels (:mod:`.levels`)."""
