"""The receiver's SQL, one folder per backend (loaded by ``a2a_push.database``)."""
