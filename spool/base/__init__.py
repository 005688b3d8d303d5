"""The floor everything stands on: errors, the clock, times as text, records, crash points.

Nothing here imports anything else of spool's, so any layer may use it: these are the records
and rules that the files, the processes and the API all speak (``errors``: the exception
classes and their exit codes; ``clock``: every read of time and chance; ``timetext``: times as a
job file writes them; ``records``: an attempt and a lease; ``resultjson``: a result's JSON;
``crash``: the crash points; ``lazylog``: a logger that costs nothing until used).
"""
