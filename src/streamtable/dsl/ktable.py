"""``KTable`` and ``GlobalKTable``: changelog streams read as tables (Kafka Streams' ``KTable``).

Each record is an upsert of its key; a ``None`` value is a tombstone that deletes the key.
Every aggregation result is a ``KTable``; ``to_stream()`` gives its changes as a stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streamtable.dsl._callables import check_callable
from streamtable.dsl._graph import GraphBuilder
from streamtable.dsl.joins import add_foreign_key_join, add_join
from streamtable.errors import TopologyError
from streamtable.topology.nodes import (
    AggregateNode,
    JoinKind,
    RecordOpKind,
    RecordOpNode,
    SuppressNode,
    TableOpKind,
    TableOpNode,
    WindowSpec,
)

if TYPE_CHECKING:
    from streamtable.dsl.grouped_table import KGroupedTable
    from streamtable.dsl.kstream import KStream
    from streamtable.dsl.suppressed import Suppressed
    from streamtable.serde import Serde


class KTable:
    """A table: the latest value per key, with tombstones (``None``) deleting keys.

    Results of windowed aggregations are keyed by :class:`streamtable.Windowed`.
    """

    def __init__(
        self,
        graph: GraphBuilder,
        node_name: str,
        *,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        windows: WindowSpec | None = None,
    ) -> None:
        self._graph = graph
        self._node_name = node_name
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._windows = windows

    @property
    def node_name(self) -> str:
        """Name of the node this table comes out of."""
        return self._node_name

    @property
    def windows(self) -> WindowSpec | None:
        """The window specification when the table is keyed by ``Windowed``, else ``None``."""
        return self._windows

    def __repr__(self) -> str:
        return f"KTable({self._node_name})"

    def _table_op(
        self, kind: TableOpKind, fn: Callable[..., Any], label: str, name: str | None
    ) -> str:
        node_name = self._graph.names.processor("KTABLE", label, name)
        self._graph.add(
            TableOpNode(node_name, (self._node_name,), kind=kind, fn=fn, op_label=label)
        )
        return node_name

    def _derived(self, node_name: str, *, keeps_value: bool) -> KTable:
        return KTable(
            self._graph,
            node_name,
            key_serde=self._key_serde,
            value_serde=self._value_serde if keeps_value else None,
            windows=self._windows,
        )

    def filter(self, predicate: Callable[[Any, Any], bool], name: str | None = None) -> KTable:
        """Keep rows for which ``predicate(key, value)`` is true; others become tombstones.

        A row that stops passing the predicate is forwarded as a tombstone, so downstream
        tables delete it (Kafka Streams' ``KTableFilter``). The predicate is never called
        for tombstones, which are forwarded as they are (over an aggregation, see below: only
        when the deleted aggregate passed).

        Over an aggregation (``KGroupedStream`` ``count``/``reduce``/``aggregate``,
        unwindowed or in any kind of window, or a ``KTable.group_by`` aggregation; also
        through ``map_values``) the filter also sees each update's old aggregate (per window or
        session: its aggregate before the micro-batch, also for the tombstone of a merged-away
        session) and, as Kafka Streams' ``KTableFilter`` with old
        values, sends nothing for a row that neither passes nor passed: ``group_by_key()
        .count().filter(lambda k, n: n >= 3).to_stream()`` gives only the counts from 3 on.
        Such an unwindowed stream ``count`` or built-in reducer runs as a Python fold (Spark's
        aggregation does not give the value before a micro-batch). Over the final results of a
        windowed aggregation (``suppress(Suppressed.until_window_closes())``) the old value is
        the window's aggregate before the last micro-batch that changed it (a session's: with
        the same bounds), as Kafka Streams' suppression buffer forwards it: a failing final
        result sends a tombstone only when that value passed. After
        ``suppress(Suppressed.until_time_limit(...))`` of a stream aggregation the old value
        is that of the key's last held update (Kafka Streams' suppression buffer keeps a key's
        last change), not the last value emitted.
        Elsewhere every failing update gives a tombstone, also for a
        row that never passed: Kafka Streams sends none for such a row where its filter gets
        old values (a table-table or foreign-key join, a suppression of anything but a stream
        aggregation, or a table read from a topic),
        so a consumer of those must accept ``None``. Old
        values are those Kafka Streams' record cache forwards (the store's value before the
        commit, ``None`` for a new key or window); with ``Materialized.with_caching_disabled()``
        it forwards one per record instead, and ``initializer()`` as the old value of a new
        key or time window.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.table("users").filter(lambda k, v: v["active"])
        KTable(KTABLE-FILTER-0000000003)
        """
        check_callable(predicate, "KTable.filter", "key, value", 2)
        node = self._table_op(TableOpKind.FILTER, predicate, "FILTER", name)
        return self._derived(node, keeps_value=True)

    def filter_not(self, predicate: Callable[[Any, Any], bool], name: str | None = None) -> KTable:
        """Keep rows for which ``predicate(key, value)`` is false; others become tombstones.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.table("users").filter_not(lambda k, v: v["banned"])
        KTable(KTABLE-FILTER-0000000003)
        """
        from streamtable.dsl.kstream import _Negate

        check_callable(predicate, "KTable.filter_not", "key, value", 2)
        node = self._table_op(TableOpKind.FILTER, _Negate(predicate), "FILTER", name)
        return self._derived(node, keeps_value=True)

    def map_values(self, mapper: Callable[[Any], Any], name: str | None = None) -> KTable:
        """Map each non-null value with ``mapper(value)``; tombstones stay tombstones.

        Unlike ``KStream.map_values`` the mapper is never called with ``None`` (Kafka Streams'
        ``KTableMapValues``).

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.table("users").map_values(lambda k, v: v["name"])
        Traceback (most recent call last):
            ...
        streamtable.errors.TopologyError: KTable.map_values expects a callable taking (value), ...
        """
        check_callable(mapper, "KTable.map_values", "value", 1)
        node = self._table_op(TableOpKind.MAP_VALUES, mapper, "MAPVALUES", name)
        return self._derived(node, keeps_value=False)

    def to_stream(self, name: str | None = None) -> KStream:
        """The table's changelog as a stream: one record per update, tombstones included.

        Written to a topic (``to_stream().to(topic)``), it holds upserts and tombstones, so
        a compacted topic mirrors the table.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.table("users").to_stream().to("users-changes")
        >>> print(b.build().describe())  # doctest: +ELLIPSIS
        Topologies: ...
            Processor: KTABLE-TOSTREAM-0000000003 (stores: [])
              --> KSTREAM-SINK-0000000004 ...
        """
        from streamtable.dsl.kstream import KStream

        node_name = self._graph.names.processor("KTABLE", "TOSTREAM", name)
        self._graph.add(
            RecordOpNode(
                node_name,
                (self._node_name,),
                kind=RecordOpKind.IDENTITY,
                fn=_noop,
                op_label="TOSTREAM",
            )
        )
        return KStream(
            self._graph, node_name, key_serde=self._key_serde, value_serde=self._value_serde
        )

    def suppress(self, suppressed: Suppressed, name: str | None = None) -> KTable:
        """Hold back updates (``KTable.suppress``); see :class:`streamtable.Suppressed`.

        ``Suppressed.until_window_closes()`` emits exactly one final record per window, once
        stream time has passed the window's end + grace (session windows: end + gap + grace),
        as Kafka Streams does; tombstones are not emitted. It is fused into the windowed
        aggregation, so it must be applied to the aggregation's table directly.
        ``Suppressed.until_time_limit(d)`` emits a key's latest value once stream time has
        passed the timestamp of its first held update + ``d``.

        Raises
        ------
        TopologyError
            For ``until_window_closes`` on a table that is not the direct result of a
            windowed aggregation, or if ``suppressed`` is not a :class:`Suppressed`.

        Examples
        --------
        >>> from datetime import timedelta
        >>> from streamtable import StreamsBuilder, Suppressed
        >>> b = StreamsBuilder()
        >>> b.table("users").suppress(Suppressed.until_window_closes())
        Traceback (most recent call last):
            ...
        streamtable.errors.TopologyError: Suppressed.until_window_closes needs a windowed table, ...
        >>> b.table("prices").suppress(Suppressed.until_time_limit(timedelta(seconds=30)))
        KTable(KTABLE-SUPPRESS-0000000006)
        """
        from streamtable.dsl.suppressed import Suppressed

        if not isinstance(suppressed, Suppressed):
            raise TopologyError(
                f"KTable.suppress expects a Suppressed (e.g. Suppressed.until_window_closes()), "
                f"as in Kafka Streams; got {type(suppressed).__name__}."
            )
        spec = suppressed.spec()
        if spec.until_window_closes:
            parent = next(n for n in self._graph.nodes() if n.name == self._node_name)
            if self._windows is None:
                raise TopologyError(
                    f"Suppressed.until_window_closes needs a windowed table, but "
                    f"{self._node_name!r} is not keyed by Windowed (Kafka Streams refuses it "
                    "too: 'Window close time is only defined for windowed computations'): apply "
                    "it to the result of windowed_by(...).count()/reduce()/aggregate(), or use "
                    "Suppressed.until_time_limit()."
                )
            if not isinstance(parent, AggregateNode):
                raise TopologyError(
                    f"Suppressed.until_window_closes must follow the windowed aggregation "
                    f"directly, but {self._node_name!r} is a {type(parent).__name__}. Kafka "
                    "Streams also accepts operators in between (it finds the grace period "
                    "upstream); streamtable does not yet: apply suppress() first and "
                    "filter/map the final results afterwards."
                )
        # Kafka Streams (Suppressed.withName): a named suppression takes no index
        if name is None:
            node_name = self._graph.names.processor("KTABLE", "SUPPRESS")
            store = self._graph.names.store("KTABLE", "SUPPRESS")
        else:
            node_name = self._graph.names.claim(name)
            store = self._graph.names.claim(f"{name}-store", kind="store")
        self._graph.add(
            SuppressNode(node_name, (self._node_name,), suppress=spec, store_name=store)
        )
        return KTable(
            self._graph,
            node_name,
            key_serde=self._key_serde,
            value_serde=self._value_serde,
            windows=self._windows,
        )

    def group_by(
        self,
        selector: Callable[[Any, Any], tuple[Any, Any]],
        *,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        name: str | None = None,
    ) -> KGroupedTable:
        """Re-group the table: ``selector(key, value) -> (new_key, new_value)`` (``groupBy``).

        Always repartitions. When a row changes, its old value is subtracted from the old
        group before the new value is added to the new group (Kafka Streams'
        ``KTableRepartitionMap``); a tombstone only subtracts. Rows mapped to a ``None`` key
        are skipped and counted; a ``None`` pair or a pair with a ``None`` value is neither
        added nor subtracted (as ``KTableRepartitionMap`` skips it). ``name`` (Kafka Streams'
        ``Grouped.as``) names the selecting processor and the repartition topic
        ``<name>-repartition``; by default they are ``KTABLE-SELECT-<n>`` and
        ``<aggregation's store>-repartition``.

        Raises
        ------
        TopologyError
            If the table is windowed (group a windowed table's stream instead).

        Examples
        --------
        >>> from datetime import timedelta
        >>> from streamtable import StreamsBuilder, TimeWindows
        >>> b = StreamsBuilder()
        >>> minutes = TimeWindows.of_size_with_no_grace(timedelta(minutes=1))
        >>> counts = b.stream("clicks").group_by_key().windowed_by(minutes).count()
        >>> counts.group_by(lambda window, n: (window.key, n))
        Traceback (most recent call last):
            ...
        streamtable.errors.TopologyError: KTable.group_by on a windowed table is not supported
        yet (Kafka Streams groups a windowed KTable like any other); use to_stream().group_by(...)
        instead.
        """
        from streamtable.dsl.grouped_table import KGroupedTable

        check_callable(selector, "KTable.group_by", "key, value", 2)
        if self._windows is not None:
            raise TopologyError(
                "KTable.group_by on a windowed table is not supported yet (Kafka Streams "
                "groups a windowed KTable like any other); use to_stream().group_by(...) "
                "instead."
            )
        # Kafka Streams names the selector after the grouping (Grouped.as); the repartition
        # comes with the aggregation (KGroupedTableImpl)
        select = self._table_op(TableOpKind.GROUP_BY, selector, "SELECT", name)
        return KGroupedTable(
            self._graph, select, grouping=name, key_serde=key_serde, value_serde=value_serde
        )

    # -- joins ------------------------------------------------------------------------------

    def join(
        self,
        other: KTable,
        joiner: Callable[[Any, Any], Any],
        *,
        foreign_key_extractor: Callable[[Any], Any] | None = None,
        name: str | None = None,
    ) -> KTable:
        """Inner table-table join, on the primary key or on a foreign key (``KTable.join``).

        Parameters
        ----------
        other : KTable
            The right table.
        joiner : callable
            ``joiner(left_value, right_value) -> result``; never called with ``None``.
        foreign_key_extractor : callable, optional
            ``foreign_key_extractor(left_value) -> right key``: a foreign-key join (KIP-213),
            see Notes. Without it the tables are joined on their primary keys.
        name : str, optional
            Kafka Streams' ``Named.as`` / ``TableJoined.as``: names the result (primary key:
            ``<name>``, with processors ``<name>-join-this``/``-join-other``; foreign key:
            ``<name>-result``, with ``<name>-subscription-...`` processors and topics). The
            state store is ``<name>-store`` (primary key) or ``<name>-subscription-store``
            (foreign key).

        Returns
        -------
        KTable
            Keyed by this (the left) table's keys, with the left table's key serde.

        Raises
        ------
        TopologyError
            If ``other`` is not a ``KTable``, a callable has the wrong arity, or a table is
            windowed.

        Notes
        -----
        Primary-key join: the result row of a key is ``joiner(left_value, right_value)``
        while both sides have a value; when either side is deleted the result is deleted (a
        tombstone is emitted if the result existed). Updates on either side update the
        result; output timestamp = the larger of the two sides' timestamps. Follows Kafka
        Streams' ``KTableKTableInnerJoin`` and its documented semantics table. Within a
        micro-batch only each side's last update of a key counts, as Kafka Streams' record
        cache forwards only a source table's last update per key.

        Foreign-key join (Kafka Streams' ``SubscriptionSendProcessorSupplier``,
        ``SubscriptionJoinProcessorSupplier``, ``ForeignTableJoinProcessorSupplier`` and
        ``ResponseJoinProcessorSupplier``): each left row ``(k, v)`` joins the right row of
        key ``foreign_key_extractor(v)``; the result row of ``k`` is
        ``joiner(v, right_value)`` while that right row exists.

        - A left insert/update emits ``joiner(v, right)`` if the right row exists (output
          timestamp: the larger of the two rows' timestamps). If it does not, a tombstone
          for ``k`` is emitted only when the foreign key changed (an earlier result may
          exist), as Kafka Streams does; an unchanged foreign key emits nothing.
        - When the foreign key changes, the old right row no longer contributes: the result
          comes from the new one only.
        - A left delete emits a tombstone for ``k`` (if the deleted row had a foreign key).
        - A right insert/update re-joins every left row currently referencing it; a right
          delete emits a tombstone for each of them (timestamp: the right record's).
        - A ``None`` foreign key joins nothing: a tombstone is emitted if the previous value
          had a foreign key, and the record is counted as dropped (``null_foreign_key``).

        The right table is repartitioned by its key and the left table's subscriptions by
        foreign key (Kafka Streams' ``-subscription-registration`` and
        ``-subscription-response`` topics), so the two tables need not be co-partitioned.
        Within a micro-batch updates apply in timestamp order and only the last result per
        left key is emitted (record-cache coalescing); where Kafka Streams drops a response
        computed for a left value that has since changed (its value-hash check), the result
        here is always computed from the current left value, so the final table does not
        depend on how the input is cut into micro-batches.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> customers = b.table("customers")
        >>> orders = b.table("orders")
        >>> orders.join(customers, lambda o, c: {**o, "customer": c},
        ...             foreign_key_extractor=lambda o: o["customer_id"], name="order-customer")
        KTable(order-customer-result)
        """
        return self._join(other, joiner, "inner", name, foreign_key_extractor)

    def left_join(
        self,
        other: KTable,
        joiner: Callable[[Any, Any], Any],
        *,
        foreign_key_extractor: Callable[[Any], Any] | None = None,
        name: str | None = None,
    ) -> KTable:
        """Left table-table join: every left row, joined with the right row or ``None``.

        Parameters and results as :meth:`join`; ``joiner(left_value, None)`` is called when
        the right row is absent.

        Notes
        -----
        Foreign-key left join (Kafka Streams' ``SubscriptionSendProcessorSupplier`` with
        ``leftJoin``): every left insert/update emits ``joiner(v, right or None)``,
        including when ``foreign_key_extractor(v)`` returns ``None`` (Kafka Streams 3.7+,
        KIP-962); a left delete emits a tombstone; a right update re-joins every left row
        referencing it, a right delete gives ``joiner(v, None)`` for each. Output
        timestamps as for :meth:`join`.

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> users, scores = b.table("users"), b.table("scores")
        >>> users.left_join(scores, lambda user, score: (user, score or 0))
        KTable(KTABLE-MERGE-0000000006)
        """
        return self._join(other, joiner, "left", name, foreign_key_extractor)

    def outer_join(
        self,
        other: KTable,
        joiner: Callable[[Any, Any], Any],
        *,
        foreign_key_extractor: Callable[[Any], Any] | None = None,
        name: str | None = None,
    ) -> KTable:
        """Outer table-table join: a result row while either side has a value.

        Raises
        ------
        TopologyError
            If ``foreign_key_extractor`` is given: Kafka Streams has no foreign-key outer
            join (use :meth:`left_join`).

        Examples
        --------
        >>> from streamtable import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> orders, users = b.table("orders"), b.table("users")
        >>> orders.outer_join(users, lambda o, u: (o, u), foreign_key_extractor=lambda o: o["user"])
        Traceback (most recent call last):
            ...
        streamtable.errors.TopologyError: KTable.outer_join has no foreign-key form ...
        """
        if foreign_key_extractor is not None:
            raise TopologyError(
                "KTable.outer_join has no foreign-key form (Kafka Streams offers only join "
                "and leftJoin with a foreign-key extractor); use join(...) or left_join(...) "
                "with foreign_key_extractor=."
            )
        return self._join(other, joiner, "outer", name)

    def _join(
        self,
        other: KTable,
        joiner: Callable[[Any, Any], Any],
        join_type: str,
        name: str | None,
        foreign_key_extractor: Callable[[Any], Any] | None = None,
    ) -> KTable:
        method = _method(join_type)
        if not isinstance(other, KTable):
            raise TopologyError(
                f"KTable.{method} joins another KTable, as in Kafka Streams; got "
                f"{type(other).__name__}."
            )
        check_callable(joiner, f"KTable.{method} joiner", "left_value, right_value", 2)
        if self._windows is not None or other._windows is not None:
            raise TopologyError(
                "Joins of windowed tables are not supported yet (Kafka Streams joins KTables "
                "keyed by Windowed like any other): join the input streams with "
                "KStream.join(..., JoinWindows) before aggregating instead."
            )
        if foreign_key_extractor is not None:
            check_callable(
                foreign_key_extractor, f"KTable.{method} foreign_key_extractor", "value", 1
            )
            node = add_foreign_key_join(
                self._graph,
                join_type,
                (self._node_name, other.node_name),
                joiner=joiner,
                foreign_key_extractor=foreign_key_extractor,
                name=name,
            )
            return KTable(self._graph, node, key_serde=self._key_serde)
        node = add_join(
            self._graph,
            JoinKind.TABLE_TABLE,
            join_type,
            (self._node_name, other.node_name),
            joiner=joiner,
            name=name,
        )
        return KTable(self._graph, node, key_serde=self._key_serde)


class GlobalKTable:
    """A table every instance reads in full (``StreamsBuilder.global_table``).

    Joined from a stream with a ``key_selector`` (no co-partitioning needed); it cannot be
    transformed. On Spark, stream records are redistributed by their lookup key to the
    table's state, which gives the same results as Kafka Streams' full local copy.
    """

    def __init__(self, graph: GraphBuilder, node_name: str, key_serde: Serde | None) -> None:
        self._graph = graph
        self._node_name = node_name
        self._key_serde = key_serde

    @property
    def node_name(self) -> str:
        """Name of the node this table comes out of."""
        return self._node_name

    def __repr__(self) -> str:
        return f"GlobalKTable({self._node_name})"


def _method(join_type: str) -> str:
    return {"inner": "join", "left": "left_join", "outer": "outer_join"}[join_type]


def _noop(key: Any, value: Any) -> None:
    return None
