// TEMPORARY stub until the real reader lands.
#[derive(Debug, Clone, Default)]
pub struct IcsCalendar;
impl IcsCalendar {
    pub fn covers(&self, _date: chrono::NaiveDate) -> bool {
        false
    }
}
