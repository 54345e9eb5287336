"""``manage.py bench``: what durability and the fleet cost, measured in one run (docs/benchmarks.md).

``probes`` holds the measuring tools, ``inproc`` what one in-process executor measures
(floors, steps, wake, pickup, parked runs, direct vs queued), ``customers`` the runs
parked on a customer's answer (``--customers``), ``fleet`` what needs real
worker processes (throughput of one and two, SIGKILL to resume, takeover), and
``report`` the page and chart ``--write-docs`` writes.
"""
