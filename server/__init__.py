"""`skyrl serve`: the OpenAI API and Tinker's REST API over our two clients.

`app.py` builds the HTTP app (auth, size caps, error shapes); `openai_api.py` and
`tinker_api.py` are its two route sets, `tinker_wire.py` reads and writes Tinker's
protobuf; `pool.py` runs sampling in one batching thread; `training.py` holds the Tinker
training models (LoRA through peft, or full); `store.py` keeps sessions, models and
checkpoints in SQLite so they survive a restart.
"""
