"""The ``threadwarden`` command: its entry point (`main.py`), parser, commands and printing, the
``watch`` command's printing, the demo and the embedded dev stack. Nothing else imports it."""
