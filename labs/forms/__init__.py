"""Forms: :mod:`.lab` (the lab page's dependency, policy and burst forms, whose fields and
ranges come from the engine's ``LIMITS``) and :mod:`.back_office` (sign-up, roster import,
the admin's scenario editor). Forms parse; the services validate and write."""
