"""Services: the one door for changes to lab state (HackSoft style).

``labs.services.accounts``: sign-up, roster import, join codes (platform).
``labs.services.lab``: lab sessions, bursts, faults (lab engineer).
"""
