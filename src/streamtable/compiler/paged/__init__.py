"""Stateful operators over paged state: one ``transformWithState`` per operator, many keys per call.

Python ``transformWithState`` pays per group and per state call (measured ~4 k keys/s on 2
cores), so every stateful operator here keeps the state of many keys in one *page*: keys are
hashed into :data:`~streamtable.compiler.pack_stage.STATE_PAGES` pages, a page is one group,
and its state is one pickled blob. :mod:`.pack` packs the records of each micro-batch by page
and key, :mod:`.processor` loads a page, hands each key's records (sorted) to a *kernel*, and
saves the page once. Kernels (:mod:`.table_kernels`, :mod:`.join_kernels`) hold the
semantics and are plain Python, testable without Spark.
"""
