"""Errors, typed by what the caller does about them.

- `DocumentError`: this document cannot be processed as it is (corrupt PDF, unsupported type). Mark it `failed` with
  the message and carry on with the next one. Retrying will not help.
- `TransientError`: the attempt failed for a reason outside the document (database connection lost). Retry later.
- `FatalError`: the connector cannot work in this configuration (embedding model does not match the database).
  Stop and tell the operator; processing anything would write wrong data.
"""


class ConnectorError(Exception):
    """Base of every error the connector raises on purpose."""


class DocumentError(ConnectorError):
    """Permanent failure of one document; its message is stored in `documents.last_error`."""


class FileGone(DocumentError):
    """A folder row's file is not where the row says: deleted, or renamed since the row was claimed."""


class UnsupportedDocument(DocumentError):
    """The file type or MIME type has no converter."""


class ConversionError(DocumentError):
    """The converter could not read the document (corrupt, encrypted, no text)."""


class NotApplicable(ConnectorError):
    """A chunking strategy does not apply to this document (e.g. `page` on text without pages): the candidate is
    recorded as skipped, with this message, and the others compete."""


class TransientError(ConnectorError):
    """Worth retrying: the failure was not caused by the document."""


class UnusableVector(TransientError):
    """The endpoint answered a vector no search can rank (zero, or not finite) for one of the inputs: worth retrying,
    but it is that input's own answer, so a batch of documents is embedded again one document at a time and only the
    document it belongs to pays a try."""


class ConnectionLostBeforeWrite(TransientError):
    """The database connection was found lost as a write began, before any of it was sent: the outage is not the
    documents' doing, and none of them is charged a try for it."""


class FatalError(ConnectorError):
    """Stop the process: continuing would write wrong or inconsistent data."""


class EmbeddingModelMismatch(FatalError):
    """The database was set up for a different embedding model or dimension."""
