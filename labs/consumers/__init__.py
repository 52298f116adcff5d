"""Websocket consumers, one module each: :mod:`.lab` (a session's live page) and
:mod:`.dashboard` (a class's dashboard). Thin: they check who may watch, read through
:mod:`labs.selectors`, render through :mod:`labs.presenters` and forward channel-layer pushes."""
