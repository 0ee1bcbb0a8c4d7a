-- One slice of an import's new nodes (ranks :first to :last, parents ranked first).
INSERT INTO nodes (namespace, id, parent_id, name, kind, content, metadata)
SELECT :ns, x.id, x.parent, x.name, x.kind, x.content, x.metadata FROM pk_import_new x
WHERE x.rank BETWEEN :first AND :last
