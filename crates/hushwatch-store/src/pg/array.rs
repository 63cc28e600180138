//! An array parameter (`= ANY($1)`): PostgreSQL's alone, so only the
//! PostgreSQL branch of an operation binds one; SQLite refuses it rather
//! than bind something else.

#[derive(Debug)]
pub(crate) struct TextArray<'a>(pub(crate) &'a [String]);

impl tokio_postgres::types::ToSql for TextArray<'_> {
    fn to_sql(
        &self,
        ty: &tokio_postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        self.0.to_sql(ty, out)
    }

    fn accepts(ty: &tokio_postgres::types::Type) -> bool {
        <&[String] as tokio_postgres::types::ToSql>::accepts(ty)
    }

    tokio_postgres::types::to_sql_checked!();
}

impl rusqlite::ToSql for TextArray<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Err(rusqlite::Error::ToSqlConversionFailure(
            "an array parameter on SQLite".into(),
        ))
    }
}
