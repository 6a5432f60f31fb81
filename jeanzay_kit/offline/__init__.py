"""Compute nodes without internet (docs/offline.md): every network access a run makes found
before the queue (`jzk check`, `jzk submit`), fetched once where the network is
(`jzk prefetch`, `jzk submit --prefetch`), and the libraries' offline switches in the job."""
