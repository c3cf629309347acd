"""The spec language, torch-free: check kinds (:mod:`.kinds`), expectations (:mod:`.expect`),
entries (:mod:`.entry`) and the readers of an observation that the kinds measure with
(:mod:`.observed`, :mod:`.bandwidth`)."""
