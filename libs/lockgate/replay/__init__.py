"""Replay: recorded candidates again, through the same gates, in a fixture world of their own.

``record`` selects recorded candidates from the views; ``fixtures`` answers what they
ask of a world from recorded evidence or declared fixtures (a missing one fails
closed); ``world`` runs them through the services' handlers on a private broker;
``counterfactual`` asks another policy bundle about the recorded decisions; ``report``
puts each beside the record; ``sources`` reads runs and contracts as the ``replay`` role.
"""
