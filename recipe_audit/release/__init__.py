"""Cards from the tracking store, and the release decisions made on them: a card computed from
an experiment's reruns (``compute``), several audit sets side by side (``shift``), the cards at
the end of a sweep (``sweep``), a card verified against the store it came from (``verify``)."""
