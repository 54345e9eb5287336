"""What the model is handed: the live conversation, its prompts, and untrusted text kept as data.

Owns the messages the loop builds and sends (``live``), the fence that keeps customer and
tool text from reading as instructions (``fence``), a model's reply made safe before
anything stores or sends it (``untrusted``), the system prompt and opening turn
(``prompts``) and the recorded prompt versions (``prompt_versions``). May import tools'
registry and the step payloads; never the database outside ``prompt_versions``.
"""
