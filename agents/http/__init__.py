"""The REST edge shared by the apps' APIs: authentication, parsers, JSON bodies, paging,
ordering, the schema and the access-log middleware."""
