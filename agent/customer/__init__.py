"""The customer in the loop: a run that asks the customer and waits for the answer.

Waiting for a customer is the approval gate's shape with a person outside the company:
``ask_customer`` sends the question like any reply (an irreversible effect, claimed once
in the ledger), then the run parks on a durable receive for that ticket's next message
from the customer — no thread held, for the merchant's reply window — and the answer
reaches the model fenced, as untrusted customer text. A message only wakes the run; the
thread in the database is the authority, re-read in a step.

- ``wait``  — the run's steps: park, read the thread, resume (the wait handed back to the
  deadline as approval waits are), and the clock the reply window is read on;
- ``route`` — ``customer_message_route``: what a customer's new message on a ticket does
  (wake the run that waits for it, or open a new run as the merchant allows), the one
  function every channel's customer message goes through;
- ``sweep`` — a waiting run whose window passed, or whose wake-up was lost, is woken.

May import the desk, the DBOS client and names, and a run's services; never the loop or
the engine.
"""
