"""The projector: the event stream folded into the views every query reads."""
